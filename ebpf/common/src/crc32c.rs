//! CRC32c (Castagnoli), the SCTP checksum, and its incremental update.
//!
//! SCTP's checksum covers the whole SCTP packet but no IP pseudo-header, so rewriting the IP
//! addresses leaves it valid, while rewriting a port does not; and a CRC has no "replace 16 bits"
//! helper like the Internet checksum. CRCs are linear, though: for two messages of the same
//! length, `crc(a) ^ crc(b) == crc0(a ^ b)`, where `crc0` starts from 0 and skips the final xor.
//! Rewriting the 4 port bytes at the start of an `len`-byte packet therefore changes the CRC by
//! `crc0(delta4 followed by len-4 zero bytes)` = `crc0(delta4) * x^(8*(len-4)) mod P`: a few
//! dozen table lookups instead of a pass over the payload.
//!
//! Everything works in the reflected bit order SCTP (and the kernel) use: bit 31 is x^0.

/// The reflected Castagnoli polynomial.
pub const POLY: u32 = 0x82F6_3B78;

// At run time (in BPF) everything is table lookups and XORs. Bit tests, even written as
// masks, are what the verifier cannot walk cheaply: it follows both outcomes of every one of
// them (recent kernels even fork on the `(x << k) s>> 63 & K` mask idiom LLVM emits for a
// select), which made the update alone exceed its million-instruction budget.

/// One step of the reflected CRC register: a shift, reduced by P when a bit falls off.
const fn shift(c: u32) -> u32 {
    if c & 1 != 0 {
        (c >> 1) ^ POLY
    } else {
        c >> 1
    }
}

/// `a * b mod P` (both reflected). Compile time only.
pub const fn multmodp(a: u32, b: u32) -> u32 {
    let mut p: u32 = 0;
    let mut b = b;
    let mut i = 0;
    while i < 32 {
        if a & (1 << (31 - i)) != 0 {
            p ^= b;
        }
        b = shift(b);
        i += 1;
    }
    p
}

const fn x2n_table() -> [u32; 32] {
    let mut t = [0u32; 32];
    // x^1 in the reflected order.
    let mut p: u32 = 1 << 30;
    let mut k = 0;
    while k < 32 {
        t[k] = p;
        p = multmodp(p, p);
        k += 1;
    }
    t
}

/// `X2N[k] = x^(2^k) mod P`.
pub const X2N: [u32; 32] = x2n_table();

/// The classic byte table: the register after feeding one byte `v` from 0.
const fn byte_table() -> [u32; 256] {
    let mut t = [0u32; 256];
    let mut v = 0;
    while v < 256 {
        let mut c = v as u32;
        let mut b = 0;
        while b < 8 {
            c = shift(c);
            b += 1;
        }
        t[v] = c;
        v += 1;
    }
    t
}

/// See [`byte_table`].
pub static BYTE: [u32; 256] = byte_table();

/// Bits of the number of zero bytes the update can carry a register over.
const ZERO_BITS: usize = 14;

/// The longest SCTP packet (common header included) whose CRC the programs can update:
/// beyond 16 KiB, more than any MTU. Longer packets are dropped rather than sent with a CRC the
/// receiver would reject anyway.
pub const MAX_LEN: usize = (1 << ZERO_BITS) - 1 + 4;

/// `SHIFT[j][bit][k][v]`: byte `k` (`v << 8k`) of a register, multiplied by
/// `x^(8 * 2^j)` when `bit` is 1 and left as it is when 0. XOR-ing the four bytes' entries
/// multiplies a whole register, so carrying it over `n` zero bytes is 14 rounds of 4 lookups,
/// the bits of `n` choosing the table instead of a branch.
pub static SHIFT: [[[[u32; 256]; 4]; 2]; ZERO_BITS] = shift_tables();

const fn shift_tables() -> [[[[u32; 256]; 4]; 2]; ZERO_BITS] {
    let mut t = [[[[0u32; 256]; 4]; 2]; ZERO_BITS];
    let mut j = 0;
    while j < ZERO_BITS {
        let factor = X2N[j + 3];
        let mut k = 0;
        while k < 4 {
            // Linear in v: the product of each single bit, then every byte value as XORs.
            let mut basis = [0u32; 8];
            let mut bit = 0;
            while bit < 8 {
                basis[bit] = multmodp(1 << (8 * k + bit), factor);
                bit += 1;
            }
            let mut v = 0;
            while v < 256 {
                t[j][0][k][v] = (v as u32) << (8 * k);
                if v > 0 {
                    let low = (v as u32).trailing_zeros() as usize;
                    t[j][1][k][v] = t[j][1][k][v & (v - 1)] ^ basis[low];
                }
                v += 1;
            }
            k += 1;
        }
        j += 1;
    }
    t
}

/// The new checksum of an SCTP packet of `len` bytes (common header included) whose first four
/// bytes (source and destination port) changed from `old` to `new`. `crc` and the result are
/// the checksum field read and written as a little-endian `u32`, as SCTP stores it. `None` when
/// the packet is longer than [`MAX_LEN`] (or shorter than its header).
#[inline(always)]
pub fn update_ports(crc: u32, old: [u8; 4], new: [u8; 4], len: u32) -> Option<u32> {
    let zeros = len.checked_sub(4)? as usize;
    if zeros > MAX_LEN - 4 {
        return None;
    }
    // The register of the 4 changed bytes (old XOR new), fed from 0.
    let mut c: u32 = 0;
    let mut i = 0;
    while i < 4 {
        c = (c >> 8) ^ BYTE[((c ^ u32::from(old[i] ^ new[i])) & 0xff) as usize];
        i += 1;
    }
    // Carried over the rest of the packet (zeros in the difference).
    let mut j = 0;
    while j < ZERO_BITS {
        let t = &SHIFT[j][(zeros >> j) & 1];
        c = t[0][(c & 0xff) as usize]
            ^ t[1][((c >> 8) & 0xff) as usize]
            ^ t[2][((c >> 16) & 0xff) as usize]
            ^ t[3][(c >> 24) as usize];
        j += 1;
    }
    Some(crc ^ c)
}

/// The full CRC32c of `data` (for tests and for building packets; the BPF side only updates).
pub fn checksum(data: &[u8]) -> u32 {
    let mut c = !0u32;
    for &byte in data {
        c ^= u32::from(byte);
        for _ in 0..8 {
            c = shift(c);
        }
    }
    !c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_vector() {
        assert_eq!(checksum(b"123456789"), 0xE306_9283);
    }

    #[test]
    fn incremental_update_matches_recomputation() {
        extern crate std;
        let mut packet = std::vec![0u8; MAX_LEN];
        for (i, b) in packet.iter_mut().enumerate() {
            *b = (i * 7 + 3) as u8;
        }
        for len in [12usize, 13, 48, 64, 299, 300, 1480, 9000, MAX_LEN] {
            let p = &mut packet[..len];
            p[8..12].copy_from_slice(&[0; 4]);
            let before = checksum(p);
            let old = [p[0], p[1], p[2], p[3]];
            let new = [0x1f, 0x90, old[2] ^ 0x5a, 0x00];
            p[..4].copy_from_slice(&new);
            assert_eq!(update_ports(before, old, new, len as u32), Some(checksum(p)), "len {len}");
        }
        assert_eq!(update_ports(0, [0; 4], [1; 4], MAX_LEN as u32 + 5), None);
    }
}
