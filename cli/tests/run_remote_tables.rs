//! Client mode hands out the driver's private export tables the CUDA runtime needs: the program
//! `recorder/tests/fake/tables.c` asks the client library (through `gpuless run --remote`, a
//! real server on the stand-in driver) for each table and calls the slots cudart calls; the
//! answers must be the driver's (sizes, context checks, context-local storage, the primary
//! context), and the integrity check's answer must be what the driver would compute for the
//! inputs the program sees in its own process (table and function addresses, pid, thread,
//! the session's device) — `gpuless_analyzer::integrity`, itself checked against the real
//! driver's answers.

mod serve_harness;
mod support;

use gpuless_analyzer::integrity::{answer, DeviceIds, Inputs};
use serve_harness::{run_client, Server};

fn hex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

fn num(s: &str) -> u64 {
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).unwrap(),
        None => s.parse().unwrap(),
    }
}

#[test]
fn the_runtime_s_private_tables_answer_as_the_driver_does() {
    let dir = tempfile::tempdir().unwrap();
    let (libdir, prog) = support::build_program(dir.path(), "tables", &["-l:libcuda.so.1", "-lpthread"]);

    let srv = Server::start(dir.path(), &libdir, &[], &[]);
    let ran = run_client(&srv, &prog);
    let (stdout, stderr) = (&ran.stdout, &ran.stderr);
    assert!(ran.ok, "stdout:\n{stdout}\nstderr:\n{stderr}");
    let line = |key: &str| ran.line(key);
    // The driver's table sizes (bytes, the first word), measured on the device machine.
    assert_eq!(line("sizes"), ["104", "24", "56", "120", "24"]);
    assert_eq!(line("unknown_table"), ["1"], "a table the client lacks is refused as the driver refuses one");
    assert!(stderr.contains("does not implement the driver's private table 01020300"), "{stderr}");
    assert_eq!(line("primary_same"), ["1"], "slot 2 hands out the primary context");
    assert_eq!(line("cls_missing"), ["400"], "the driver answers INVALID_HANDLE for a missing key");
    assert_eq!(line("cls_value"), ["1", "1"]);
    assert_eq!(line("cls_deleted"), ["400"]);
    assert_eq!(line("checks"), ["0", "1", "0"], "first out-value 0, second untouched, slot 3 0");
    assert_eq!(line("hooks"), ["1024", "14"]);
    // ToolsModule (cuFFT): the driver's size; slot 7 hands each function of the module to the
    // callback in the image's order, the same handle cuModuleGetFunction gave for `scale`, and
    // returns the count (measured with scripts/probe-tools-module.py on the H200).
    assert_eq!(line("tools_module_size"), ["792"]);
    assert_eq!(line("module_functions"), ["2", "wide", "scale", "user", "1", "same", "1", "distinct", "1"]);
    assert_eq!(line("module_functions_none"), ["0", "0"]);
    // cuBLASLt's fp16 set-up table: handed out (a refused one crashes cuBLASLt), every slot
    // refused with CUDA_ERROR_NOT_SUPPORTED and said once.
    assert_eq!(line("cublaslt_size"), ["136"]);
    assert_eq!(line("cublaslt_slots"), ["801", "801", "1"]);
    assert_eq!(
        stderr.matches("does not implement slot 4 of the driver's private table 1734dc26").count(),
        1,
        "{stderr}"
    );
    let other: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("does not implement slot") || l.contains("a slot it does not implement"))
        .filter(|l| !l.contains("1734dc26"))
        .collect();
    assert!(other.is_empty(), "no slot the program called is missing: {other:?}");

    // The integrity check: fixed answers for versions ending in 0 and 1, the HMAC for 2.
    let integrity: Vec<(String, String)> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("integrity "))
        .map(|l| {
            let (v, r) = l.split_once(' ').unwrap();
            (v.to_string(), r.to_string())
        })
        .collect();
    assert_eq!(integrity.len(), 3, "{stdout}");
    assert_eq!(integrity[0].1, "8ed383aa1f4cd1e83341181c03cb675c");
    assert_eq!(integrity[1].1, "8ed383aa1f4cd1e81841181c03cb675c");
    let i = line("inputs");
    let mut uuid = [0u8; 16];
    uuid.copy_from_slice(&hex(&i[6]));
    let inputs = Inputs {
        driver_version: num(&i[0]) as u32,
        runtime_version: 13002,
        pid: num(&i[1]) as u32,
        thread: num(&i[2]) as u32,
        cudart_table: num(&i[3]),
        integrity_table: num(&i[4]),
        check_fn: num(&i[5]),
        timestamp: 1_764_000_000,
        devices: vec![DeviceIds {
            uuid,
            pci_domain: num(&i[7]) as u32,
            pci_bus: num(&i[8]) as u32,
            pci_device: num(&i[9]) as u32,
        }],
    };
    let want = answer(&inputs);
    let lo = u64::from_le_bytes(want[..8].try_into().unwrap());
    let hi = u64::from_le_bytes(want[8..].try_into().unwrap());
    assert_eq!(integrity[2].1, format!("{hi:016x}{lo:016x}"), "inputs {inputs:?}");
    assert_eq!(inputs.driver_version, 13000, "the session's driver (the stand-in's)");
}
