//! Which launches of a hot body can run beside the others: a launch whose inputs the body never
//! writes (model weights, set-up uploads) depends on nothing before it. Its output is moved to a
//! buffer of its own (so that it no longer shares a workspace with its neighbours), the kernels
//! that read it are pointed there, and the CUDA graph runs it on a second branch that joins the
//! main one at its first reader. ResNet-50's filter layout transforms (cuDNN converts every 3x3
//! filter to NHWC on every call) are the case that pays: 16 launches, about a tenth of the body.
//!
//! The analysis works on what the body's first pass did ([`Effect`], found by hashing device
//! memory around each call, `blockhash.rs`): the ranges each call wrote and the parameter words
//! that point into device memory. A kernel may also reach memory through pointers stored in
//! device memory, which no parameter shows; the graph's results are verified against the
//! recording on every launch, and a plan that changes them is dropped.

use super::blockhash::{Span, BLOCK};

/// What one call of the body did in the body's first pass.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Effect {
    /// Whether it is a kernel launch (only launches move).
    pub launch: bool,
    /// Parameter words (or pointer arguments) that point into device memory, recorded values.
    pub words: Vec<u64>,
    /// Recorded ranges whose bytes it changed.
    pub writes: Vec<Span>,
}

/// A launch that runs on the side branch, writing a buffer of its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SideLaunch {
    /// Index of the launch in the body.
    pub call: usize,
    /// The recorded range it writes, from its output pointer: moved to its own buffer.
    pub out: Span,
    /// Later calls of the body that read the range through a parameter (in body order; the
    /// first waits for the side branch).
    pub readers: Vec<usize>,
}

/// Gaps smaller than this between written blocks count as one output (a block that happened
/// to be written with the bytes already there).
const GAP: u64 = 4 * BLOCK;

fn overlaps(a: Span, b: Span) -> bool {
    a.0 < b.1 && b.0 < a.1
}

fn reads(e: &Effect, span: Span) -> bool {
    e.words.iter().any(|&w| span.0 <= w && w < span.1)
}

fn writes(e: &Effect, span: Span) -> bool {
    e.writes.iter().any(|&w| overlaps(w, span))
}

/// The one output range of a launch: its writes merged across small gaps, starting at the
/// parameter that points at (or just before) the first written block.
fn output(e: &Effect) -> Option<Span> {
    let mut w = e.writes.clone();
    w.sort_unstable();
    let (first, last) = (w.first()?, w.last()?);
    if w.windows(2).any(|w| w[1].0.saturating_sub(w[0].1) >= GAP) {
        return None;
    }
    let start = e.words.iter().copied().filter(|&w| w <= first.0 && first.0 - w < BLOCK).max()?;
    Some((start, last.1))
}

/// The launches of `body` that can run on the side branch, in body order.
pub fn side_launches(body: &[Effect]) -> Vec<SideLaunch> {
    let written: Vec<Span> = body.iter().flat_map(|e| e.writes.iter().copied()).collect();
    let ever_written = |s: Span| written.iter().any(|&w| overlaps(w, s));
    let mut out = Vec::new();
    for (i, e) in body.iter().enumerate() {
        if !e.launch {
            continue;
        }
        let Some(span) = output(e) else { continue };
        let len = span.1 - span.0;
        // It has inputs besides its output (a kernel given only its output pointer may work in
        // place), and every one reaches memory the body never writes (read as far as the
        // output is long). Whether it reads its output's old bytes is checked on the device
        // before the plan is used (`lower.rs`).
        let inputs: Vec<u64> = e.words.iter().copied().filter(|&w| w != span.0).collect();
        if inputs.is_empty() || inputs.iter().any(|&w| ever_written((w, w + len))) {
            continue;
        }
        // Its readers: the calls after it that name the range, up to the next call that writes
        // there. None may read it before it runs (in this iteration or from the last one).
        let mut readers = Vec::new();
        let mut ok = true;
        let mut redefined = false;
        for (j, later) in body.iter().enumerate().skip(i + 1) {
            if writes(later, span) {
                // The next writer: it may name the range only as its own output.
                let own = output(later).map(|o| o.0);
                ok = later.words.iter().all(|&w| !(span.0 <= w && w < span.1) || Some(w) == own);
                redefined = true;
                break;
            }
            if reads(later, span) {
                if !later.launch {
                    ok = false;
                    break;
                }
                readers.push(j);
            }
        }
        if ok && !redefined {
            for earlier in &body[..i] {
                if writes(earlier, span) {
                    break;
                }
                if reads(earlier, span) {
                    ok = false;
                    break;
                }
            }
        }
        if ok && !readers.is_empty() {
            out.push(SideLaunch { call: i, out: span, readers });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const W: u64 = 0x6400_0000_0000; // weights (written only by the set-up)
    const WS: u64 = 0x6400_1000_0000; // a workspace shared by every convolution
    const ACT: u64 = 0x6400_2000_0000; // activations

    fn launch(words: &[u64], writes: &[Span]) -> Effect {
        Effect { launch: true, words: words.to_vec(), writes: writes.to_vec() }
    }

    /// Two convolutions as cuDNN runs them: the filter transform writes the shared workspace
    /// from the weights, the convolution reads it and the activation; the second convolution's
    /// transform overwrites the workspace.
    fn two_convolutions() -> Vec<Effect> {
        vec![
            launch(&[W, WS], &[(WS, WS + 4096)]),                         // 0 filter transform A
            launch(&[ACT, WS, ACT + 8192], &[(ACT + 8192, ACT + 12288)]), // 1 conv A
            launch(&[ACT + 8192], &[(ACT + 8192, ACT + 12288)]),          // 2 relu in place
            launch(&[W + 65536, WS], &[(WS, WS + 2048)]),                 // 3 filter transform B
            launch(&[ACT + 8192, WS, ACT], &[(ACT, ACT + 4096)]),         // 4 conv B
        ]
    }

    #[test]
    fn filter_transforms_move_to_the_side_with_their_readers() {
        // The relu (only its output pointer) and the convolutions (inputs the body writes) stay.
        let s = side_launches(&two_convolutions());
        assert_eq!(
            s,
            [
                SideLaunch { call: 0, out: (WS, WS + 4096), readers: vec![1] },
                SideLaunch { call: 3, out: (WS, WS + 2048), readers: vec![4] },
            ]
        );
    }

    #[test]
    fn launches_reading_what_the_body_writes_stay() {
        let mut b = two_convolutions();
        // Transform A now reads an activation: it depends on the body.
        b[0].words = vec![ACT + 8192, WS];
        let s = side_launches(&b);
        assert_eq!(s.iter().map(|l| l.call).collect::<Vec<_>>(), [3]);
    }

    #[test]
    fn an_output_read_before_it_is_written_or_changed_in_place_stays() {
        // Conv B changes its own filter in place: transform B stays (transform A still moves).
        let mut b = two_convolutions();
        b[4].writes.push((WS + 1024, WS + 1280)); // conv B writes into its own filter
        let s = side_launches(&b);
        assert_eq!(s.iter().map(|l| l.call).collect::<Vec<_>>(), [0]);
        // A copy that reads the output keeps the launch in place.
        let mut b = two_convolutions();
        b.insert(1, Effect { launch: false, words: vec![WS], writes: vec![] });
        assert_eq!(side_launches(&b).iter().map(|l| l.call).collect::<Vec<_>>(), [4]);
        // Without transform A, conv A reads transform B's output of the previous iteration.
        let mut b = two_convolutions();
        b.remove(0);
        assert!(side_launches(&b).is_empty());
    }

    /// Readers are pointed at the moved range's new place, at the same offsets; other words
    /// (the activation next to it, scalars) stay.
    #[test]
    fn readers_are_pointed_at_the_new_place() {
        let new = 0x7000_0000_0000u64;
        let mut params: Vec<u8> = [WS, WS + 4096, ACT, 7, WS + 100].iter().flat_map(|w| w.to_le_bytes()).collect();
        let n = super::super::launch::relocate_words(&mut params, &[((WS, WS + 4096), new)]);
        let words: Vec<u64> = params.chunks_exact(8).map(|w| u64::from_le_bytes(w.try_into().unwrap())).collect();
        assert_eq!(n, 2);
        assert_eq!(words, [new, WS + 4096, ACT, 7, new + 100]);
    }

    #[test]
    fn outputs_are_found_from_the_output_pointer() {
        // Unchanged blocks inside the output (bytes already equal) do not split it, and the
        // range starts at the pointer even when the first block was unchanged.
        let e = launch(&[W, WS], &[(WS + 256, WS + 1024), (WS + 1280, WS + 4096)]);
        assert_eq!(output(&e), None, "no parameter within a block before the first write");
        let e = launch(&[W, WS + 200], &[(WS + 256, WS + 1024), (WS + 1280, WS + 4096)]);
        assert_eq!(output(&e), Some((WS + 200, WS + 4096)));
        let e = launch(&[W, WS], &[(WS, WS + 256), (WS + 65536, WS + 65792)]);
        assert_eq!(output(&e), None, "two separate outputs");
        assert_eq!(output(&launch(&[W], &[])), None, "writes nothing");
    }
}
