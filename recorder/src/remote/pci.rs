//! Where a device sits on the PCI bus, as its description says, and its bus id as NVML and
//! `cuDeviceGetPCIBusId` write and read it.

use gpuless_traces::protocol::DeviceDescription;

/// A PCI bus id as NVML and `cuDeviceGetPCIBusId` write it (`NVML_DEVICE_PCI_BUS_ID_FMT`,
/// `%08X:%02X:%02X.0`).
pub(crate) fn bus_id(domain: u32, bus: u32, device: u32) -> String {
    format!("{domain:08X}:{bus:02X}:{device:02X}.0")
}

/// The legacy form (`NVML_DEVICE_PCI_BUS_ID_LEGACY_FMT`, `%04X:%02X:%02X.0`).
pub(crate) fn bus_id_legacy(domain: u32, bus: u32, device: u32) -> String {
    format!("{domain:04X}:{bus:02X}:{device:02X}.0")
}

/// (domain, bus, device) of a bus id `[domain:]bus:device[.function]` in hex, any case and
/// width; `None` when it is not one.
pub(crate) fn parse_bus_id(s: &str) -> Option<(u32, u32, u32)> {
    let s = s.trim();
    let s = s.rsplit_once('.').map_or(s, |(head, f)| if f.chars().all(|c| c.is_ascii_hexdigit()) { head } else { s });
    let parts: Vec<&str> = s.split(':').collect();
    let hex = |p: &str| (!p.is_empty() && p.len() <= 8).then(|| u32::from_str_radix(p, 16).ok()).flatten();
    match parts.as_slice() {
        [d, b, v] => Some((hex(d)?, hex(b)?, hex(v)?)),
        [b, v] => Some((0, hex(b)?, hex(v)?)),
        _ => None,
    }
}

/// The device's PCI domain, bus and device (`CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID` 50,
/// `PCI_BUS_ID` 33, `PCI_DEVICE_ID` 34).
pub(crate) fn pci_location(d: &DeviceDescription) -> (u32, u32, u32) {
    let a = |id| d.attribute(id).unwrap_or(0) as u32;
    (a(50), a(33), a(34))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bus_ids_are_formatted_and_parsed_as_nvml_does() {
        assert_eq!(bus_id(0, 0x1b, 0), "00000000:1B:00.0");
        assert_eq!(bus_id(0x10, 0xc3, 0x1f), "00000010:C3:1F.0");
        assert_eq!(bus_id_legacy(0, 0x1b, 0), "0000:1B:00.0");
        for s in ["00000000:1B:00.0", "0000:1b:00.0", "1b:00", "00000000:1B:00", " 0:1B:0.0 "] {
            assert_eq!(parse_bus_id(s), Some((0, 0x1b, 0)), "{s}");
        }
        assert_eq!(parse_bus_id("00000010:C3:1F.0"), Some((0x10, 0xc3, 0x1f)));
        for bad in ["", "1B", "x:1B:00.0", "0:1B:00:00.0", "000000000:1B:00.0", "GPU-00"] {
            assert_eq!(parse_bus_id(bad), None, "{bad}");
        }
        // The attributes a description holds, in both directions.
        let d = DeviceDescription { attributes: vec![(50, 0), (33, 0xc3), (34, 0x1f)], ..Default::default() };
        let (dom, bus, dev) = pci_location(&d);
        assert_eq!(parse_bus_id(&bus_id(dom, bus, dev)), Some(pci_location(&d)));
    }
}
