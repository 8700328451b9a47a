//! Runtime registrations, recorded as annotations (`__cudaRegisterFatBinary`,
//! `__cudaRegisterFunction`, `__cudaRegisterVar`, `__cudaRegisterManagedVar`): which host stub
//! is which kernel and which host variable is which device variable, per fat binary handle.

use gpuless_analyzer::api::ApiFunction;
use serde::Serialize;

use crate::model::{CallRecord, Value};

/// Most functions (and variables) listed; the counts go on.
const LIST_MAX: usize = 1 << 20;

/// A kernel registered with the runtime.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RegisteredFunction {
    /// Handle of the fat binary it was registered with (`__cudaRegisterFatBinary`'s result).
    pub fatbin: u64,
    /// Address of its host stub (what `cudaLaunchKernel` is given).
    pub host: u64,
    /// Kernel (device function) name.
    pub name: String,
}

/// A device variable registered with the runtime.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RegisteredVariable {
    /// Handle of the fat binary it was registered with.
    pub fatbin: u64,
    /// Address of its host shadow.
    pub host: u64,
    /// Device variable name.
    pub name: String,
    /// Size in bytes.
    pub size: u64,
    /// `__constant__`.
    pub constant: bool,
    /// Managed (`__managed__`).
    pub managed: bool,
}

/// What the runtime was told at registration.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Registrations {
    /// Fat binaries registered.
    pub fatbins: u64,
    /// Kernels registered.
    pub functions: u64,
    /// Variables registered.
    pub variables: u64,
    /// Registered kernels in recording order (the first 2^20).
    pub function_list: Vec<RegisteredFunction>,
    /// Registered variables in recording order (the first 2^20).
    pub variable_list: Vec<RegisteredVariable>,
}

fn word(v: Option<&Value>) -> u64 {
    match v {
        Some(Value::HostPtr(x) | Value::U64(x) | Value::Size(x)) => *x,
        Some(Value::I64(x)) => *x as u64,
        _ => 0,
    }
}

impl Registrations {
    /// Counts a record of `f` (any function of the registration group).
    pub(crate) fn add(&mut self, f: &ApiFunction, r: &CallRecord) {
        let arg = |name: &str| f.args.iter().position(|a| a.name == name).and_then(|i| r.args.get(i));
        let name = || match arg("deviceName") {
            Some(Value::Str(s)) => s.clone(),
            _ => String::new(),
        };
        let fatbin = word(arg("fatCubinHandle"));
        match f.name {
            "__cudaRegisterFatBinary" => self.fatbins += 1,
            "__cudaRegisterFunction" => {
                self.functions += 1;
                if self.function_list.len() < LIST_MAX {
                    self.function_list.push(RegisteredFunction { fatbin, host: word(arg("hostFun")), name: name() });
                }
            }
            "__cudaRegisterVar" | "__cudaRegisterManagedVar" => {
                self.variables += 1;
                if self.variable_list.len() < LIST_MAX {
                    let managed = f.name == "__cudaRegisterManagedVar";
                    let host = word(arg(if managed { "hostVarPtrAddress" } else { "hostVar" }));
                    let (size, constant) = (word(arg("size")), word(arg("constant")) != 0);
                    self.variable_list.push(RegisteredVariable { fatbin, host, name: name(), size, constant, managed });
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use gpuless_analyzer::api::{by_name, Variant};

    use super::*;
    use crate::model::Function;

    fn rec(name: &str, args: Vec<Value>) -> (&'static ApiFunction, CallRecord) {
        let f = by_name(name).expect("in the table");
        let mut r = CallRecord::new(1, f.level, Function::Known(f.id));
        r.variant = Variant::BASE;
        r.args = args;
        (f, r)
    }

    #[test]
    fn functions_and_variables_are_listed_by_name() {
        let mut g = Registrations::default();
        let (f, r) = rec("__cudaRegisterFatBinary", vec![Value::HostPtr(0x1000)]);
        g.add(f, &r);
        let h = Value::HostPtr(0x5000);
        let (f, r) = rec(
            "__cudaRegisterFunction",
            vec![
                h.clone(),
                Value::HostPtr(0x4010),
                Value::HostPtr(0x2000),
                Value::Str("_Z5scalePfi".into()),
                Value::U64(u64::MAX),
                Value::Null,
                Value::Null,
                Value::Null,
                Value::Null,
                Value::Null,
            ],
        );
        g.add(f, &r);
        let (f, r) = rec(
            "__cudaRegisterVar",
            vec![
                h,
                Value::HostPtr(0x6000),
                Value::HostPtr(0x2100),
                Value::Str("table".into()),
                Value::U64(0),
                Value::Size(64),
                Value::U64(1),
                Value::U64(0),
            ],
        );
        g.add(f, &r);
        assert_eq!((g.fatbins, g.functions, g.variables), (1, 1, 1));
        assert_eq!(g.function_list, [RegisteredFunction { fatbin: 0x5000, host: 0x4010, name: "_Z5scalePfi".into() }]);
        assert_eq!(
            g.variable_list,
            [RegisteredVariable {
                fatbin: 0x5000,
                host: 0x6000,
                name: "table".into(),
                size: 64,
                constant: true,
                managed: false
            }]
        );
    }
}
