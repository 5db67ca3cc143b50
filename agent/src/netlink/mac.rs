//! The one MAC address type of the agent's netlink work.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A 6-byte Ethernet address. Serialized as text ("02:00:00:00:00:01"), readable by whoever
/// inspects a record.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Mac(pub [u8; 6]);

/// Text that is not a 6-byte MAC address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{text:?} is not a MAC address; write 6 bytes in hex like \"0a:58:0a:01:00:05\"")]
pub struct MacError {
    pub text: String,
}

impl Mac {
    /// Group (multicast/broadcast) addresses cannot be an interface's own; the kernel refuses them.
    pub fn is_unicast(&self) -> bool {
        self.0[0] & 1 == 0
    }

    pub fn is_zero(&self) -> bool {
        self.0 == [0; 6]
    }

    /// The first six bytes of a kernel address buffer (`IFLA_VF_MAC` carries 32), zero-padded
    /// when shorter.
    pub fn from_kernel_buffer(bytes: &[u8]) -> Mac {
        let mut mac = [0; 6];
        for (to, from) in mac.iter_mut().zip(bytes) {
            *to = *from;
        }
        Mac(mac)
    }

    /// An interface's hardware address, when it is an Ethernet one (6 bytes).
    pub fn from_hardware_address(bytes: &[u8]) -> Option<Mac> {
        <[u8; 6]>::try_from(bytes).ok().map(Mac)
    }
}

impl FromStr for Mac {
    type Err = MacError;

    /// Accepts the 6-byte forms Go's `net.ParseMAC` accepts: `0a:58:0a:01:00:05`,
    /// `0a-58-0a-01-00-05` and `0a58.0a01.0005`.
    fn from_str(text: &str) -> Result<Mac, MacError> {
        let invalid = || MacError { text: text.to_owned() };
        let hex: String = if text.contains('.') {
            let groups: Vec<&str> = text.split('.').collect();
            if groups.len() != 3 || groups.iter().any(|g| g.len() != 4) {
                return Err(invalid());
            }
            groups.concat()
        } else {
            let separator = if text.contains('-') { '-' } else { ':' };
            let parts: Vec<&str> = text.split(separator).collect();
            if parts.len() != 6 || parts.iter().any(|p| p.len() != 2) {
                return Err(invalid());
            }
            parts.concat()
        };
        let mut bytes = [0u8; 6];
        for (i, byte) in bytes.iter_mut().enumerate() {
            let pair = hex.get(2 * i..2 * i + 2).ok_or_else(invalid)?;
            *byte = u8::from_str_radix(pair, 16).map_err(|_| invalid())?;
        }
        Ok(Mac(bytes))
    }
}

impl fmt::Display for Mac {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hardware_address(&self.0))
    }
}

impl fmt::Debug for Mac {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Mac({self})")
    }
}

impl Serialize for Mac {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Mac {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Mac, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// A hardware address as Go's `net.HardwareAddr.String()` prints it (lowercase hex, colons), which
/// is what CNI results carry.
pub fn hardware_address(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn macs_parse_in_every_six_byte_form_and_print_like_go() {
        for text in ["0a:58:0A:01:00:05", "0a-58-0a-01-00-05", "0a58.0a01.0005"] {
            let mac: Mac = text.parse().unwrap();
            assert_eq!(mac, Mac([0x0a, 0x58, 0x0a, 0x01, 0x00, 0x05]), "{text}");
            assert_eq!(mac.to_string(), "0a:58:0a:01:00:05");
        }
    }

    #[test]
    fn malformed_macs_are_refused_with_an_example() {
        for text in [
            "",
            "0a:58:0a:01:00",
            "0a:58:0a:01:00:05:06",
            "0a:58:0a:01:00:zz",
            "0a:58-0a:01:00:05",
            "a:58:0a:01:00:05",
        ] {
            let err = text.parse::<Mac>().unwrap_err().to_string();
            assert!(err.contains("0a:58:0a:01:00:05"), "{text}: {err}");
        }
    }

    #[test]
    fn unicast_and_zero_macs() {
        assert!(Mac([0x0a, 0, 0, 0, 0, 1]).is_unicast());
        assert!(!Mac([0x01, 0, 0x5e, 0, 0, 1]).is_unicast());
        assert!(Mac([0; 6]).is_zero());
    }

    #[test]
    fn macs_travel_in_records_as_text() {
        let mac = Mac([2, 0, 0, 0, 0, 0xab]);
        let json = serde_json::to_string(&mac).unwrap();
        assert_eq!(json, "\"02:00:00:00:00:ab\"");
        assert_eq!(serde_json::from_str::<Mac>(&json).unwrap(), mac);
        assert_eq!(Mac::from_kernel_buffer(&[2, 0, 0, 0, 0, 0xab, 0, 0]), mac);
        assert_eq!(Mac::from_hardware_address(&[0; 20]), None, "InfiniBand is not Ethernet");
    }

    #[test]
    fn hardware_addresses_print_lowercase_with_colons() {
        assert_eq!(hardware_address(&[0xAA, 0x0b, 0, 1, 2, 0xff]), "aa:0b:00:01:02:ff");
    }
}
