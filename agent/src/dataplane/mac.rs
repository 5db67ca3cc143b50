//! Link-layer (MAC) addresses as people and CNI results write them: `aa:bb:cc:dd:ee:ff`.

/// `0a:58:0A:01:00:05` (or with dashes) → bytes; None unless six hex pairs.
pub fn parse_mac(text: &str) -> Option<[u8; 6]> {
    let mut mac = [0u8; 6];
    let mut parts = text.split([':', '-']);
    for byte in &mut mac {
        *byte = u8::from_str_radix(parts.next()?, 16).ok()?;
    }
    parts.next().is_none().then_some(mac)
}

/// Bytes → `aa:bb:cc:dd:ee:ff`.
pub fn format_mac(mac: &[u8; 6]) -> String {
    mac.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn macs_round_trip_and_malformed_ones_are_refused() {
        assert_eq!(parse_mac("0a:58:0A:01:00:05"), Some([0x0a, 0x58, 0x0a, 1, 0, 5]));
        assert_eq!(format_mac(&[0x0a, 0x58, 0x0a, 1, 0, 5]), "0a:58:0a:01:00:05");
        assert_eq!(parse_mac("0a-58-0a-01-00-05"), Some([0x0a, 0x58, 0x0a, 1, 0, 5]));
        assert_eq!(parse_mac("0a:58"), None);
        assert_eq!(parse_mac("0a:58:0a:01:00:05:07"), None);
    }
}
