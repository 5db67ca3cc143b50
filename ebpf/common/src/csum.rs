//! Incremental updates of Internet checksums (RFC 1071 sums, updated per RFC 1624:
//! `HC' = ~(~HC + ~m + m')`), for fields the kernel's checksum helpers cannot reach: the
//! checksums inside the packet an ICMP error quotes. Pure arithmetic, tested against checksums
//! recomputed from scratch.
//!
//! Values are 16-bit words as they sit in the packet read on a little-endian machine (the BPF
//! target here): one's-complement sums are byte-order independent as long as every operand is
//! read the same way.

/// Folds a 32-bit accumulator to 16 bits with end-around carry.
#[inline(always)]
pub const fn fold(mut sum: u32) -> u16 {
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    sum as u16
}

/// A running change of one checksum: the sum of `~old + new` over every changed 16-bit word.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Delta(pub u32);

impl Delta {
    /// One 16-bit word changed from `old` to `new`.
    #[inline(always)]
    pub const fn word(self, old: u16, new: u16) -> Delta {
        let s = self.0 + (!old) as u32 + new as u32;
        Delta((s & 0xffff) + (s >> 16))
    }

    /// A 32-bit field (two words) changed.
    #[inline(always)]
    pub const fn dword(self, old: u32, new: u32) -> Delta {
        self.word(old as u16, new as u16).word((old >> 16) as u16, (new >> 16) as u16)
    }

    /// An address of four words changed.
    #[inline(always)]
    pub const fn addr(self, old: &[u32; 4], new: &[u32; 4]) -> Delta {
        self.dword(old[0], new[0]).dword(old[1], new[1]).dword(old[2], new[2]).dword(old[3], new[3])
    }

    /// An IP address changed, as the packet holds it: the last word of an IPv4 address
    /// (IPv4-mapped here: the prefix is not in the packet), all four of an IPv6 one.
    #[inline(always)]
    pub const fn ip(self, v6: bool, old: &[u32; 4], new: &[u32; 4]) -> Delta {
        if v6 {
            self.addr(old, new)
        } else {
            self.dword(old[3], new[3])
        }
    }

    /// Whether the changes sum to nothing: 0 or 0xffff, one's complement zero.
    #[inline(always)]
    pub const fn is_nil(self) -> bool {
        self.0 == 0 || self.0 == 0xffff
    }

    /// Both changes.
    #[inline(always)]
    pub const fn plus(self, o: Delta) -> Delta {
        let s = self.0 + o.0;
        Delta((s & 0xffff) + (s >> 16))
    }

    /// The checksum `csum` (as stored) after the changes.
    #[inline(always)]
    pub const fn apply(self, csum: u16) -> u16 {
        !fold((!csum) as u32 + self.0)
    }

    /// For a UDP checksum: 0 means "none" (IPv4) and stays 0; a result of 0 is sent as 0xffff.
    #[inline(always)]
    pub const fn apply_udp(self, csum: u16) -> u16 {
        if csum == 0 {
            return 0;
        }
        let c = self.apply(csum);
        if c == 0 {
            0xffff
        } else {
            c
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::vec::Vec;

    /// The checksum of `data` from scratch (words read little-endian, like the BPF side).
    fn checksum(data: &[u8]) -> u16 {
        let mut sum: u32 = 0;
        for c in data.chunks(2) {
            sum += u32::from(u16::from_le_bytes([c[0], *c.get(1).unwrap_or(&0)]));
            sum = (sum & 0xffff) + (sum >> 16);
        }
        !fold(sum)
    }

    fn word_at(d: &[u8], o: usize) -> u16 {
        u16::from_le_bytes([d[o], d[o + 1]])
    }

    /// Changing bytes of a buffer whose checksum sits at `at` and updating it incrementally
    /// gives the checksum recomputed from scratch, for many buffers and changes.
    #[test]
    fn incremental_updates_equal_recomputed_checksums() {
        let mut seed = 0x1234_5678u32;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            seed
        };
        for _ in 0..5000 {
            let len = 8 + (next() % 60) as usize * 2;
            let mut d: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            let at = 2 * (next() as usize % (len / 2));
            d[at] = 0;
            d[at + 1] = 0;
            let c = checksum(&d);
            d[at..at + 2].copy_from_slice(&c.to_le_bytes());
            let mut delta = Delta::default();
            for _ in 0..(1 + next() % 6) {
                let o = 2 * (next() as usize % (len / 2));
                if o == at {
                    continue;
                }
                let old = word_at(&d, o);
                let new = next() as u16;
                d[o..o + 2].copy_from_slice(&new.to_le_bytes());
                delta = delta.word(old, new);
            }
            let updated = delta.apply(word_at(&d, at));
            d[at..at + 2].copy_from_slice(&updated.to_le_bytes());
            // Verifying: the sum over the buffer with its checksum is all ones.
            let mut sum: u32 = 0;
            for c in d.chunks(2) {
                sum += u32::from(u16::from_le_bytes([c[0], c[1]]));
            }
            assert_eq!(fold(sum), 0xffff, "{d:02x?}");
        }
    }

    #[test]
    fn address_and_dword_changes_are_word_changes() {
        let old = [0x0102_0304, 0, 0xffff_0000, 0x0a4d_0001];
        let new = [0x0102_0304, 0, 0xffff_0000, 0x0a4d_0005];
        let by_words = Delta::default().word(0x0001, 0x0005).word(0x0a4d, 0x0a4d);
        assert_eq!(Delta::default().addr(&old, &new).apply(0x1234), by_words.apply(0x1234));
        assert_eq!(Delta::default().dword(7, 7).apply(0xbeef), 0xbeef);
    }

    #[test]
    fn an_ipv4_address_change_is_its_last_word_and_unchanged_ones_are_nil() {
        let (old, new) = ([0, 0, 0xffff_0000, 0x0a4d_0001], [0, 0, 0xffff_0000, 0x0a4d_0005]);
        assert_eq!(Delta::default().ip(false, &old, &new), Delta::default().dword(old[3], new[3]));
        assert_eq!(Delta::default().ip(true, &old, &new), Delta::default().addr(&old, &new));
        assert!(!Delta::default().ip(false, &old, &new).is_nil());
        assert!(Delta::default().ip(true, &old, &old).is_nil());
        assert!(Delta::default().word(0x1234, 0x1234).is_nil());
        assert!(Delta::default().is_nil());
    }

    #[test]
    fn udp_none_stays_none_and_zero_is_sent_as_all_ones() {
        assert_eq!(Delta::default().word(1, 2).apply_udp(0), 0);
        // A change that lands exactly on 0 is sent as 0xffff.
        let d = Delta::default().word(0x0000, 0x0001);
        let c = d.apply(0x0001);
        assert!(c == 0 || c == 0xffff);
        assert_ne!(d.apply_udp(0x0001), 0);
    }
}
