//! Reading a recorded call's arguments by their names in the API table.

use gpuless_analyzer::api::ApiFunction;
use gpuless_traces::{CallRecord, Value};

use super::ReplayError;

pub(crate) struct Call<'a> {
    pub f: &'static ApiFunction,
    pub rec: &'a CallRecord,
}

impl<'a> Call<'a> {
    pub fn arg(&self, name: &str) -> Option<&'a Value> {
        let i = self.f.args.iter().position(|a| a.name == name)?;
        self.rec.args.get(i)
    }

    /// The value of the first argument of `kind` (the API table's kind, not its name).
    pub fn arg_of_kind(&self, kind: gpuless_analyzer::api::ArgKind) -> Option<&'a Value> {
        let i = self.f.args.iter().position(|a| a.kind == kind)?;
        self.rec.args.get(i)
    }

    pub fn result(&self, name: &str) -> Option<&'a Value> {
        let i = self.f.out_args().position(|(_, a)| a.name == name)?;
        self.rec.results.get(i)
    }

    pub fn word(&self, name: &str) -> Result<u64, ReplayError> {
        self.arg(name).and_then(word).ok_or_else(|| self.missing(name))
    }

    pub fn out_word(&self, name: &str) -> Result<u64, ReplayError> {
        self.result(name).and_then(word).ok_or_else(|| self.missing(name))
    }

    pub fn missing(&self, what: &str) -> ReplayError {
        ReplayError::Inconsistent {
            seq: self.rec.seq,
            what: self.f.name.to_string(),
            problem: format!("argument `{what}` not recorded"),
        }
    }

    /// The record cannot be executed here (ends the replay or session, naming it).
    pub fn unsupported(&self, problem: &str) -> ReplayError {
        ReplayError::Unsupported { seq: self.rec.seq, what: self.f.name.to_string(), problem: problem.to_string() }
    }

    pub fn inconsistent(&self, problem: String) -> ReplayError {
        ReplayError::Inconsistent { seq: self.rec.seq, what: self.f.name.to_string(), problem }
    }
}

pub(crate) fn word(v: &Value) -> Option<u64> {
    match *v {
        Value::U64(x) | Value::DevPtr(x) | Value::HostPtr(x) | Value::Size(x) | Value::Handle(_, x) => Some(x),
        Value::I64(x) => Some(x as u64),
        Value::Null => Some(0),
        _ => None,
    }
}
