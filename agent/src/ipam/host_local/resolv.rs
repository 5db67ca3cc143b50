//! `resolvConf`: a resolv.conf file turned into the result's DNS, as the reference's
//! `parseResolvConf` does it.

use std::io;
use std::path::Path;

use crate::cni::result::Dns;
use crate::ipam::IpamError;

pub fn parse(text: &str) -> Dns {
    let mut dns = Dns::default();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [key, first, ..] = fields[..] else { continue };
        let owned = |f: &[&str]| f.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        match key {
            "nameserver" => dns.nameservers.push(first.to_owned()),
            "domain" => dns.domain = Some(first.to_owned()),
            "search" => dns.search.extend(owned(&fields[1..])),
            "options" => dns.options.extend(owned(&fields[1..])),
            _ => {}
        }
    }
    dns
}

/// Blocking.
pub fn read(path: &Path) -> Result<Dns, IpamError> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(parse(&text)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Err(IpamError::invalid_config(format!(
            "open {}: {e}; fix or remove ipam.resolvConf",
            path.display()
        ))),
        Err(e) => Err(IpamError::io(format!("open {}", path.display()), e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cni::{CniCode, ErrorCode};

    #[test]
    fn parses_like_the_reference() {
        let text = "# comment\n; other comment\nnameserver 10.0.0.53\n  nameserver   fd00::53  # trailing\n\
                    domain a.example\ndomain b.example\nsearch x.example y.example\nsearch z.example\n\
                    options ndots:2 edns0\noptions rotate\nnameserver\nsortlist 1.2.3.4\n\n";
        let dns = parse(text);
        assert_eq!(dns.nameservers, ["10.0.0.53", "fd00::53"]);
        assert_eq!(dns.domain.as_deref(), Some("b.example"), "the last domain wins");
        assert_eq!(dns.search, ["x.example", "y.example", "z.example"]);
        assert_eq!(dns.options, ["ndots:2", "edns0", "rotate"]);
        assert!(parse("").is_empty());
    }

    #[test]
    fn a_missing_file_is_a_config_error() {
        let err = read(Path::new("/nonexistent/resolv.conf")).unwrap_err();
        assert_eq!(err.cni_code(), ErrorCode::InvalidNetworkConfig);
        assert!(err.to_string().starts_with("open /nonexistent/resolv.conf: "), "{err}");
    }
}
