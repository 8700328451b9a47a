//! How a `gpuless serve` executor answers a client's `cuGraphKernelNodeGetParams` (`gpu` in the
//! API table): the node's launch and the values of its kernel arguments, as the words of a
//! query answer (`QueryResult::values`). The executor encodes ([`KernelNodeAnswer::to_words`])
//! what its driver answered, with the function and kernel named in the client's terms; the
//! client decodes ([`KernelNodeAnswer::from_words`]) and builds the program's
//! `CUDA_KERNEL_NODE_PARAMS` with `kernelParams` pointing at storage of its own.
//!
//! Words, in order: `func`, `kern` (client handles, 0 for none), grid x, y, z, block x, y, z,
//! dynamic shared memory, the number of arguments, the bytes of argument values, each
//! argument's place (`offset | size << 32`), then the values laid out at those offsets, eight
//! bytes a word, little-endian, the last word padded with zeros.

use super::structs::KernelNode;

/// Most bytes of argument values an answer may carry (the driver's limit is 32,764).
pub const MAX_PARAM_BYTES: usize = 64 << 10;

/// Words before the argument places.
const HEAD: usize = 11;

/// A kernel node's parameters as answered to a client.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KernelNodeAnswer {
    /// `func`, `kern`, grid, block and dynamic shared memory (`kernel_params`, `extra` and
    /// `ctx` are the client's to fill).
    pub node: KernelNode,
    /// (offset, size) of each argument in `params`.
    pub layout: Vec<(u32, u32)>,
    /// The arguments' values, each at its offset.
    pub params: Vec<u8>,
}

/// Why answer words do not describe a kernel node.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnswerError {
    /// Fewer words than the counts in the answer call for.
    #[error("kernel node answer of {got} words, {want} needed")]
    Short {
        /// Words present.
        got: usize,
        /// Words the header's counts need.
        want: usize,
    },
    /// More argument bytes than [`MAX_PARAM_BYTES`].
    #[error("kernel node answer with {0} bytes of arguments (at most {MAX_PARAM_BYTES})")]
    TooLarge(u64),
    /// An argument outside the values sent.
    #[error("argument {index} at {offset}+{size} lies beyond the {len} bytes of values")]
    Outside {
        /// Which argument.
        index: usize,
        /// Its offset.
        offset: u32,
        /// Its size.
        size: u32,
        /// Bytes of values in the answer.
        len: usize,
    },
}

impl KernelNodeAnswer {
    /// The answer's words.
    pub fn to_words(&self) -> Vec<u64> {
        let n = &self.node;
        let mut w = Vec::with_capacity(HEAD + self.layout.len() + self.params.len().div_ceil(8));
        w.extend([n.func, n.kern]);
        w.extend(n.grid.iter().chain(&n.block).chain([&n.shared_mem]).map(|&v| u64::from(v)));
        w.extend([self.layout.len() as u64, self.params.len() as u64]);
        w.extend(self.layout.iter().map(|&(off, size)| u64::from(off) | (u64::from(size) << 32)));
        w.extend(self.params.chunks(8).map(|c| {
            let mut b = [0u8; 8];
            b[..c.len()].copy_from_slice(c);
            u64::from_le_bytes(b)
        }));
        w
    }

    /// Reads answer words; every argument must lie inside the values sent.
    pub fn from_words(w: &[u64]) -> Result<KernelNodeAnswer, AnswerError> {
        let short = |want: usize| AnswerError::Short { got: w.len(), want };
        let head = w.get(..HEAD).ok_or(short(HEAD))?;
        let (count, len) = (head[9], head[10]);
        if len > MAX_PARAM_BYTES as u64 || count > MAX_PARAM_BYTES as u64 {
            return Err(AnswerError::TooLarge(len.max(count)));
        }
        let (count, len) = (count as usize, len as usize);
        let want = HEAD + count + len.div_ceil(8);
        let places = w.get(HEAD..HEAD + count).ok_or(short(want))?;
        let values = w.get(HEAD + count..want).ok_or(short(want))?;
        let mut layout = Vec::with_capacity(count);
        for (index, &p) in places.iter().enumerate() {
            let (offset, size) = (p as u32, (p >> 32) as u32);
            if u64::from(offset) + u64::from(size) > len as u64 {
                return Err(AnswerError::Outside { index, offset, size, len });
            }
            layout.push((offset, size));
        }
        let mut params: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        params.truncate(len);
        let dim = |i: usize| head[i] as u32;
        let node = KernelNode {
            func: head[0],
            kern: head[1],
            grid: [dim(2), dim(3), dim(4)],
            block: [dim(5), dim(6), dim(7)],
            shared_mem: dim(8),
            ..KernelNode::default()
        };
        Ok(KernelNodeAnswer { node, layout, params })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer() -> KernelNodeAnswer {
        KernelNodeAnswer {
            node: KernelNode {
                func: 0x5000_0010,
                kern: 0x5000_0020,
                grid: [64, 2, 1],
                block: [256, 1, 1],
                shared_mem: 48,
                ..KernelNode::default()
            },
            layout: vec![(0, 8), (8, 4), (12, 4), (16, 1)],
            params: (1..=17).collect(),
        }
    }

    #[test]
    fn an_answer_reads_back_as_written() {
        let a = answer();
        let w = a.to_words();
        assert_eq!(w.len(), HEAD + 4 + 3, "17 bytes of values take three words");
        assert_eq!(KernelNodeAnswer::from_words(&w), Ok(a));
        let none = KernelNodeAnswer::default();
        assert_eq!(KernelNodeAnswer::from_words(&none.to_words()), Ok(none), "a kernel without arguments");
    }

    #[test]
    fn answers_that_do_not_add_up_are_refused() {
        let w = answer().to_words();
        assert_eq!(KernelNodeAnswer::from_words(&w[..5]), Err(AnswerError::Short { got: 5, want: HEAD }));
        assert!(matches!(KernelNodeAnswer::from_words(&w[..w.len() - 1]), Err(AnswerError::Short { .. })));
        let mut outside = w.clone();
        outside[HEAD + 3] = 17 | (1 << 32); // one byte at 17 of 17
        assert!(matches!(KernelNodeAnswer::from_words(&outside), Err(AnswerError::Outside { index: 3, .. })));
        let mut wrapping = w.clone();
        wrapping[HEAD] = u64::from(u32::MAX) | (u64::from(u32::MAX) << 32);
        assert!(matches!(KernelNodeAnswer::from_words(&wrapping), Err(AnswerError::Outside { index: 0, .. })));
        let mut huge = w.clone();
        huge[10] = u64::MAX;
        assert_eq!(KernelNodeAnswer::from_words(&huge), Err(AnswerError::TooLarge(u64::MAX)));
        let mut many = w;
        many[9] = 1 << 40;
        assert!(matches!(KernelNodeAnswer::from_words(&many), Err(AnswerError::TooLarge(_))));
    }
}
