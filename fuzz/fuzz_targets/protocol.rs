//! The session protocol's decoders (`traces::protocol`): a byte stream read as frames, each
//! decoded as its message kind, and segments decoded as call records. Every input must give a
//! message or an error, never a panic or an unbounded allocation.
#![no_main]

use gpuless_traces::protocol::{read_frame, segment, Message};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut r = data;
    let mut payload = Vec::new();
    while let Ok(h) = read_frame(&mut r, &mut payload) {
        if let Ok(m) = Message::decode(h.kind, h.flags, &payload) {
            // What decodes re-encodes to a payload that decodes to the same message.
            let again = Message::decode(m.kind(), m.flags(), &m.encode()).expect("re-encoded message decodes");
            assert_eq!(again, m);
        }
        let _ = segment::decode(&payload, 0);
    }
});
