//! The driver's own names and strings of `CUresult` codes (`cuGetErrorName`,
//! `cuGetErrorString`), as driver 580 answers them: `cuda-13.0-errors.tsv`, read on the GPU by
//! `testdata/cuda/suite/driver_answers.c`. Client mode answers both from here.

use std::collections::HashMap;
use std::sync::OnceLock;

const TABLE: &str = include_str!("cuda-13.0-errors.tsv");

fn table() -> &'static HashMap<u32, (&'static str, &'static str)> {
    static T: OnceLock<HashMap<u32, (&'static str, &'static str)>> = OnceLock::new();
    T.get_or_init(|| {
        TABLE
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
            .filter_map(|l| {
                let mut c = l.splitn(3, '\t');
                Some((c.next()?.parse().ok()?, (c.next()?, c.next()?)))
            })
            .collect()
    })
}

/// The driver's name of `code` (`CUDA_ERROR_INVALID_VALUE`), if it names it.
pub fn error_name(code: u32) -> Option<&'static str> {
    table().get(&code).map(|e| e.0)
}

/// The driver's description of `code` (`invalid argument`), if it describes it.
pub fn error_string(code: u32) -> Option<&'static str> {
    table().get(&code).map(|e| e.1)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_drivers_names_and_strings() {
        assert_eq!(super::error_name(0), Some("CUDA_SUCCESS"));
        assert_eq!(super::error_string(0), Some("no error"));
        assert_eq!(super::error_string(1), Some("invalid argument"));
        assert_eq!(super::error_name(999), Some("CUDA_ERROR_UNKNOWN"));
        assert_eq!(super::error_name(123_456), None);
        // The driver names 101 codes; cuda.h's MULTICAST_RESOURCE_FULL (47) is not one of them.
        assert_eq!(super::table().len(), 101);
        assert_eq!(super::error_name(47), None);
    }
}
