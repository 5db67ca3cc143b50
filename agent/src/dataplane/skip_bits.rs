//! Array maps of 64-bit words read as one bit per key, set when the programs may skip a hash
//! lookup that would miss: the ports no mapping has (`PM_UNMAPPED`) and the interfaces without
//! a transmit limit (`BW_UNLIMITED`). A clear bit only means "look it up", so a map new to the
//! pin directory (all clear) hides nothing. Each map has one writer at a time (the bits are
//! read, changed and written back), whose table keeps them: a bit is cleared before the entry
//! it would hide is written, set once the last such entry is gone, and every word is written
//! from the entries on reconcile.

use aya::maps::{Array, Map, MapData};

use super::maps::{map_error, TableError};

/// Where a key's bit sits: its word's index and the bit within it.
pub type Bit = (u32, u64);

pub struct SkipBits {
    words: Array<MapData, u64>,
    name: &'static str,
}

impl SkipBits {
    pub fn new(map: Map, name: &'static str) -> Result<SkipBits, TableError> {
        Ok(SkipBits { words: Array::try_from(map).map_err(map_error(name, "opening"))?, name })
    }

    /// Sets (`skip`) or clears `bit`, writing only a change (`what` names the key in errors).
    pub fn set(
        &mut self,
        (index, bit): Bit,
        skip: bool,
        what: impl Fn() -> String,
    ) -> Result<(), TableError> {
        let word = self.words.get(&index, 0).map_err(map_error(self.name, what()))?;
        let next = if skip { word | bit } else { word & !bit };
        if next == word {
            return Ok(());
        }
        self.words.set(index, next, 0).map_err(map_error(self.name, what()))
    }

    /// Whether `bit` is set; `None` when its word cannot be read.
    pub fn get(&self, (index, bit): Bit) -> Option<bool> {
        self.words.get(&index, 0).ok().map(|w| w & bit != 0)
    }

    /// Writes every word that differs from `want` (from [`all_set_but`]).
    pub fn sync(&mut self, want: &[u64]) -> Result<(), TableError> {
        for (index, want) in (0u32..).zip(want) {
            let what = || format!("writing word {index}");
            if self.words.get(&index, 0).map_err(map_error(self.name, what()))? != *want {
                self.words.set(index, *want, 0).map_err(map_error(self.name, what()))?;
            }
        }
        Ok(())
    }
}

/// `len` words with every bit set but those of `clear`.
pub fn all_set_but(len: u32, clear: impl IntoIterator<Item = Bit>) -> Vec<u64> {
    let mut words = vec![u64::MAX; len as usize];
    for (index, bit) in clear {
        words[index as usize] &= !bit;
    }
    words
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_words_have_every_bit_set_but_those_given() {
        assert_eq!(all_set_but(3, []), vec![u64::MAX; 3]);
        let words = all_set_but(3, [(0, 1), (2, 1 << 63), (0, 1 << 5), (0, 1)]);
        assert_eq!(words, vec![!(1 | 1 << 5), u64::MAX, !(1 << 63)], "a bit given twice is cleared once");
    }
}
