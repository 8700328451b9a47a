//! Sending an answer: device-to-host results that would not fit in the answer's frame go first,
//! as `OutputPart` frames of at most [`PART`] bytes each (the client puts them back together).

use std::io::Write;

use gpuless_traces::protocol::codec::Put;
use gpuless_traces::protocol::message::kind;
use gpuless_traces::protocol::{write_frame, Answer, FrameHeader, Message, ProtocolError};

/// Results inside the answer's frame, together at most this many bytes.
const INLINE: usize = 16 << 20;
/// One part's bytes.
const PART: usize = 16 << 20;

/// Writes `a` (large results first, in parts) and flushes.
pub(crate) fn send(w: &mut impl Write, mut a: Answer) -> Result<(), ProtocolError> {
    let mut inline = 0usize;
    let mut kept = Vec::with_capacity(a.outputs.len());
    for (seq, bytes) in std::mem::take(&mut a.outputs) {
        if inline + bytes.len() <= INLINE {
            inline += bytes.len();
            kept.push((seq, bytes));
            continue;
        }
        for (i, part) in bytes.chunks(PART).enumerate() {
            let mut head = Put::default();
            head.u64(seq).u64(bytes.len() as u64).u64((i * PART) as u64);
            let h = FrameHeader { len: (head.0.len() + part.len()) as u32, kind: kind::OUTPUT_PART, flags: 0 };
            w.write_all(&h.encode())?;
            w.write_all(&head.0)?;
            w.write_all(part)?;
        }
    }
    a.outputs = kept;
    let m = Message::Answer(a);
    write_frame(w, m.kind(), m.flags(), &m.encode())?;
    w.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use gpuless_traces::protocol::{read_frame, Answer, Message};

    /// A 40 MiB result goes in three parts before the answer; a small one stays inside it.
    #[test]
    fn large_results_go_in_parts_before_the_answer() {
        let big: Vec<u8> = (0..40u32 << 20).map(|i| (i % 251) as u8).collect();
        let a = Answer { through_seq: 9, outputs: vec![(5, big.clone()), (6, vec![7; 100])], ..Answer::default() };
        let mut wire = Vec::new();
        super::send(&mut wire, a).unwrap();
        let mut r = &wire[..];
        let mut parts = Vec::new();
        let mut payload = Vec::new();
        let answer = loop {
            let h = read_frame(&mut r, &mut payload).unwrap();
            match Message::decode(h.kind, h.flags, &payload).unwrap() {
                Message::OutputPart { seq, total, offset, bytes } => parts.push((seq, total, offset, bytes)),
                Message::Answer(a) => break a,
                m => panic!("{}", m.name()),
            }
        };
        assert!(r.is_empty());
        assert_eq!(parts.len(), 3);
        assert!(parts.iter().all(|p| p.0 == 5 && p.1 == big.len() as u64));
        assert_eq!(parts.iter().map(|p| p.2).collect::<Vec<_>>(), [0, 16 << 20, 32 << 20]);
        let joined: Vec<u8> = parts.into_iter().flat_map(|p| p.3).collect();
        assert!(joined == big);
        assert_eq!(answer.outputs, vec![(6, vec![7; 100])]);
    }
}
