//! Byte layouts of the driver structs whose fields the recorder and the replayer must read or
//! rewrite: the geometry and the host, device and array sides of `CUDA_MEMCPY2D` /
//! `CUDA_MEMCPY3D`, the resource of a `CUDA_RESOURCE_DESC`, the launch of a
//! `CUDA_KERNEL_NODE_PARAMS`, and the tagged union `CUgraphNodeParams` (which member its type
//! selects, and where the fields the replayer rewrites lie). Traces store these structs as their raw bytes (x86-64 C layout,
//! little-endian); both sides agree on what the fields mean only through this module.
//!
//! **Host memory in 2D/3D copies.** When a copy's source is host memory the recorder stores the
//! bytes the driver reads, *packed*: `Depth` slices of `Height` rows of `WidthInBytes` bytes, in
//! that order, without the pitch padding (whose bytes may be uninitialized). When the
//! destination is host memory it hashes what arrived in the same packed order. The replayer
//! points the host side at a packed buffer ([`Copy::packed_side`]).

/// `CUmemorytype`: host memory.
pub const MEMORYTYPE_HOST: u32 = 1;
/// `CUmemorytype`: device memory.
pub const MEMORYTYPE_DEVICE: u32 = 2;
/// `CUmemorytype`: a CUDA array.
pub const MEMORYTYPE_ARRAY: u32 = 3;
/// `CUmemorytype`: a unified address (host or device, known only to the driver).
pub const MEMORYTYPE_UNIFIED: u32 = 4;

/// Most bytes of host memory a 2D/3D copy may move for its bytes to be stored (16 GiB).
pub const MAX_PACKED: u64 = 16 << 30;

fn get_u64(b: &[u8], at: usize) -> u64 {
    b.get(at..at + 8).map_or(0, |s| u64::from_le_bytes(s.try_into().unwrap_or([0; 8])))
}

fn get_u32(b: &[u8], at: usize) -> u32 {
    b.get(at..at + 4).map_or(0, |s| u32::from_le_bytes(s.try_into().unwrap_or([0; 4])))
}

fn put_u64(b: &mut [u8], at: usize, v: u64) {
    if let Some(s) = b.get_mut(at..at + 8) {
        s.copy_from_slice(&v.to_le_bytes());
    }
}

fn put_u32(b: &mut [u8], at: usize, v: u32) {
    if let Some(s) = b.get_mut(at..at + 4) {
        s.copy_from_slice(&v.to_le_bytes());
    }
}

/// Which struct a copy's bytes are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dims {
    /// `CUDA_MEMCPY2D` (128 bytes).
    Two,
    /// `CUDA_MEMCPY3D` (200 bytes).
    Three,
}

impl Dims {
    /// The dimensionality of a struct named in the API table, if it is a copy struct.
    pub fn of(c_struct: &str) -> Option<Dims> {
        match c_struct {
            "CUDA_MEMCPY2D" => Some(Dims::Two),
            "CUDA_MEMCPY3D" => Some(Dims::Three),
            _ => None,
        }
    }

    /// Size of the struct in bytes.
    pub fn size(self) -> usize {
        match self {
            Dims::Two => 128,
            Dims::Three => 200,
        }
    }

    /// Field offsets of one side: (x, y, z, memory type, host, device, array, pitch, height).
    /// `z` and `height` are `None` in 2D.
    fn side(self, dst: bool) -> SideOffsets {
        match (self, dst) {
            (Dims::Two, false) => {
                SideOffsets { x: 0, y: 8, z: None, ty: 16, host: 24, dev: 32, arr: 40, pitch: 48, h: None }
            }
            (Dims::Two, true) => {
                SideOffsets { x: 56, y: 64, z: None, ty: 72, host: 80, dev: 88, arr: 96, pitch: 104, h: None }
            }
            (Dims::Three, false) => {
                SideOffsets { x: 0, y: 8, z: Some(16), ty: 32, host: 40, dev: 48, arr: 56, pitch: 72, h: Some(80) }
            }
            (Dims::Three, true) => SideOffsets {
                x: 88,
                y: 96,
                z: Some(104),
                ty: 120,
                host: 128,
                dev: 136,
                arr: 144,
                pitch: 160,
                h: Some(168),
            },
        }
    }

    /// Offsets of `WidthInBytes`, `Height` and (3D) `Depth`.
    fn extent(self) -> (usize, usize, Option<usize>) {
        match self {
            Dims::Two => (112, 120, None),
            Dims::Three => (176, 184, Some(192)),
        }
    }
}

struct SideOffsets {
    x: usize,
    y: usize,
    z: Option<usize>,
    ty: usize,
    host: usize,
    dev: usize,
    arr: usize,
    pitch: usize,
    h: Option<usize>,
}

/// One side (source or destination) of a 2D/3D copy.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Side {
    /// `CUmemorytype` as stored.
    pub memory_type: u32,
    /// `srcHost` / `dstHost`.
    pub host: u64,
    /// `srcDevice` / `dstDevice` (also the address of a unified side).
    pub device: u64,
    /// `srcArray` / `dstArray`.
    pub array: u64,
    /// Offsets of the first byte: bytes, rows, slices.
    pub x: u64,
    /// See `x`.
    pub y: u64,
    /// See `x` (0 in 2D).
    pub z: u64,
    /// Bytes per row.
    pub pitch: u64,
    /// Rows per slice (3D; 0 in 2D).
    pub height: u64,
}

impl Side {
    /// The address host memory is read from or written to (host or unified pointer).
    pub fn pointer(&self) -> u64 {
        if self.memory_type == MEMORYTYPE_HOST {
            self.host
        } else {
            self.device
        }
    }
}

/// A parsed `CUDA_MEMCPY2D` / `CUDA_MEMCPY3D`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Copy {
    /// Which struct.
    pub dims: Dims,
    /// Source.
    pub src: Side,
    /// Destination.
    pub dst: Side,
    /// `WidthInBytes`.
    pub width: u64,
    /// `Height` (rows).
    pub height: u64,
    /// `Depth` (slices; 1 in 2D).
    pub depth: u64,
}

impl Copy {
    /// Reads a copy struct from its bytes (`None` if too short).
    pub fn parse(dims: Dims, b: &[u8]) -> Option<Copy> {
        if b.len() < dims.size() {
            return None;
        }
        let side = |dst| {
            let o = dims.side(dst);
            Side {
                memory_type: get_u32(b, o.ty),
                host: get_u64(b, o.host),
                device: get_u64(b, o.dev),
                array: get_u64(b, o.arr),
                x: get_u64(b, o.x),
                y: get_u64(b, o.y),
                z: o.z.map_or(0, |z| get_u64(b, z)),
                pitch: get_u64(b, o.pitch),
                height: o.h.map_or(0, |h| get_u64(b, h)),
            }
        };
        let (w, h, d) = dims.extent();
        Some(Copy {
            dims,
            src: side(false),
            dst: side(true),
            width: get_u64(b, w),
            height: get_u64(b, h),
            depth: d.map_or(1, |d| get_u64(b, d)),
        })
    }

    /// Writes one side back into the struct's bytes.
    pub fn write_side(dims: Dims, b: &mut [u8], dst: bool, s: &Side) {
        let o = dims.side(dst);
        put_u32(b, o.ty, s.memory_type);
        put_u64(b, o.host, s.host);
        put_u64(b, o.dev, s.device);
        put_u64(b, o.arr, s.array);
        put_u64(b, o.x, s.x);
        put_u64(b, o.y, s.y);
        if let Some(z) = o.z {
            put_u64(b, z, s.z);
        }
        put_u64(b, o.pitch, s.pitch);
        if let Some(h) = o.h {
            put_u64(b, h, s.height);
        }
    }

    /// Bytes of the packed host layout: width × height × depth (`None` on overflow or beyond
    /// [`MAX_PACKED`]).
    pub fn packed_len(&self) -> Option<u64> {
        let n = self.width.checked_mul(self.height)?.checked_mul(self.depth.max(1))?;
        (n <= MAX_PACKED).then_some(n)
    }

    /// Address of each row a side covers, in packed order (slice by slice, row by row); each
    /// row is `width` bytes. `base` is the side's host or unified pointer.
    pub fn rows(&self, s: &Side) -> impl Iterator<Item = u64> + '_ {
        let slice = s.pitch.wrapping_mul(s.height);
        let start =
            s.pointer().wrapping_add(s.z.wrapping_mul(slice)).wrapping_add(s.y.wrapping_mul(s.pitch)).wrapping_add(s.x);
        let (rows, pitch) = (self.height, s.pitch);
        (0..self.depth.max(1)).flat_map(move |k| {
            (0..rows).map(move |r| start.wrapping_add(k.wrapping_mul(slice)).wrapping_add(r.wrapping_mul(pitch)))
        })
    }

    /// A host side reading or writing a packed buffer at `addr` (what the replayer substitutes).
    pub fn packed_side(&self, addr: u64) -> Side {
        Side {
            memory_type: MEMORYTYPE_HOST,
            host: addr,
            device: 0,
            array: 0,
            x: 0,
            y: 0,
            z: 0,
            pitch: self.width.max(1),
            height: self.height,
        }
    }
}

/// `CUDA_RESOURCE_DESC`: offset of `resType` (u32) and of the union's first field (an array
/// handle or a device pointer).
pub const RESOURCE_TYPE_AT: usize = 0;
/// See [`RESOURCE_TYPE_AT`].
pub const RESOURCE_HANDLE_AT: usize = 8;
/// `CUresourcetype` values.
pub const RESOURCE_ARRAY: u32 = 0;
/// See [`RESOURCE_ARRAY`].
pub const RESOURCE_MIPMAPPED_ARRAY: u32 = 1;
/// See [`RESOURCE_ARRAY`].
pub const RESOURCE_LINEAR: u32 = 2;
/// See [`RESOURCE_ARRAY`].
pub const RESOURCE_PITCH2D: u32 = 3;

/// What a `CUDA_RESOURCE_DESC` refers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resource {
    /// A CUDA array handle.
    Array(u64),
    /// A mipmapped array handle.
    Mipmapped(u64),
    /// Linear or pitched device memory at this address.
    Memory(u64),
    /// A resource type this module does not know.
    Other(u32),
}

/// Reads the resource of a `CUDA_RESOURCE_DESC`.
pub fn resource(b: &[u8]) -> Resource {
    let h = get_u64(b, RESOURCE_HANDLE_AT);
    match get_u32(b, RESOURCE_TYPE_AT) {
        RESOURCE_ARRAY => Resource::Array(h),
        RESOURCE_MIPMAPPED_ARRAY => Resource::Mipmapped(h),
        RESOURCE_LINEAR | RESOURCE_PITCH2D => Resource::Memory(h),
        t => Resource::Other(t),
    }
}

/// Rewrites the handle or device pointer of a `CUDA_RESOURCE_DESC`.
pub fn set_resource(b: &mut [u8], v: u64) {
    put_u64(b, RESOURCE_HANDLE_AT, v);
}

/// The launch described by a `CUDA_KERNEL_NODE_PARAMS` (v1: 56 bytes, v2: 72 bytes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KernelNode {
    /// `func` (a `CUfunction`, or a `CUkernel` passed as one).
    pub func: u64,
    /// Grid, block, dynamic shared memory.
    pub grid: [u32; 3],
    /// See `grid`.
    pub block: [u32; 3],
    /// See `grid`.
    pub shared_mem: u32,
    /// `kernelParams` and `extra` pointers as recorded (host addresses).
    pub kernel_params: u64,
    /// See `kernel_params`.
    pub extra: u64,
    /// `kern` (v2: used when `func` is null).
    pub kern: u64,
    /// `ctx` (v2: the context of the node's function).
    pub ctx: u64,
}

/// Whether a struct named in the API table is a `CUDA_KERNEL_NODE_PARAMS` (v1 or v2).
pub fn is_kernel_node(c_struct: &str) -> bool {
    matches!(c_struct, "CUDA_KERNEL_NODE_PARAMS" | "CUDA_KERNEL_NODE_PARAMS_v1")
}

/// Size of `CUDA_KERNEL_NODE_PARAMS_v1`.
pub const KERNEL_NODE_V1: usize = 56;
/// Offsets of `kernelParams`, `extra` and `kern` in `CUDA_KERNEL_NODE_PARAMS`.
pub const KERNEL_NODE_PARAMS_AT: usize = 40;
/// See [`KERNEL_NODE_PARAMS_AT`].
pub const KERNEL_NODE_EXTRA_AT: usize = 48;
/// See [`KERNEL_NODE_PARAMS_AT`].
pub const KERNEL_NODE_KERN_AT: usize = 56;
/// See [`KERNEL_NODE_PARAMS_AT`].
pub const KERNEL_NODE_CTX_AT: usize = 64;

impl KernelNode {
    /// Reads v1 or v2 bytes (`kern` is 0 for v1).
    pub fn parse(b: &[u8]) -> Option<KernelNode> {
        if b.len() < KERNEL_NODE_V1 {
            return None;
        }
        let u = |i: usize| get_u32(b, 8 + 4 * i);
        Some(KernelNode {
            func: get_u64(b, 0),
            grid: [u(0), u(1), u(2)],
            block: [u(3), u(4), u(5)],
            shared_mem: u(6),
            kernel_params: get_u64(b, KERNEL_NODE_PARAMS_AT),
            extra: get_u64(b, KERNEL_NODE_EXTRA_AT),
            kern: if b.len() >= KERNEL_NODE_KERN_AT + 8 { get_u64(b, KERNEL_NODE_KERN_AT) } else { 0 },
            ctx: if b.len() >= KERNEL_NODE_CTX_AT + 8 { get_u64(b, KERNEL_NODE_CTX_AT) } else { 0 },
        })
    }

    /// Writes the fields into v1 (56 bytes) or v2 bytes; `kern` and `ctx` only where `b` has
    /// room for them (the inverse of [`KernelNode::parse`]; bytes between fields untouched).
    pub fn write(&self, b: &mut [u8]) {
        put_u64(b, 0, self.func);
        for (i, v) in self.grid.iter().chain(&self.block).chain([&self.shared_mem]).enumerate() {
            put_u32(b, 8 + 4 * i, *v);
        }
        put_u64(b, KERNEL_NODE_PARAMS_AT, self.kernel_params);
        put_u64(b, KERNEL_NODE_EXTRA_AT, self.extra);
        put_u64(b, KERNEL_NODE_KERN_AT, self.kern);
        put_u64(b, KERNEL_NODE_CTX_AT, self.ctx);
    }

    /// The function or kernel handle to launch.
    pub fn handle(&self) -> u64 {
        if self.func != 0 {
            self.func
        } else {
            self.kern
        }
    }
}

/// `CUgraphNodeType`: what a `CUgraphNodeParams` describes (its tag).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeType {
    /// A kernel launch (`CUDA_KERNEL_NODE_PARAMS_v3` at [`NODE_MEMBER_AT`]).
    Kernel,
    /// A copy (`CUDA_MEMCPY_NODE_PARAMS`).
    Memcpy,
    /// A memset (`CUDA_MEMSET_NODE_PARAMS_v2`).
    Memset,
    /// A host function call.
    Host,
    /// A child graph.
    ChildGraph,
    /// No operation.
    Empty,
    /// Waits for an event.
    WaitEvent,
    /// Records an event.
    EventRecord,
    /// Signals external semaphores.
    ExtSemSignal,
    /// Waits on external semaphores.
    ExtSemWait,
    /// Allocates memory.
    MemAlloc,
    /// Frees memory.
    MemFree,
    /// A batch of memory operations.
    BatchMemOp,
    /// A conditional node.
    Conditional,
    /// A type this module does not know.
    Other(u32),
}

impl NodeType {
    /// The type of a `CUgraphNodeType` value.
    pub fn from_u32(v: u32) -> NodeType {
        const ALL: [NodeType; 14] = [
            NodeType::Kernel,
            NodeType::Memcpy,
            NodeType::Memset,
            NodeType::Host,
            NodeType::ChildGraph,
            NodeType::Empty,
            NodeType::WaitEvent,
            NodeType::EventRecord,
            NodeType::ExtSemSignal,
            NodeType::ExtSemWait,
            NodeType::MemAlloc,
            NodeType::MemFree,
            NodeType::BatchMemOp,
            NodeType::Conditional,
        ];
        ALL.get(v as usize).copied().unwrap_or(NodeType::Other(v))
    }

    /// The type of the `CUgraphNodeParams` whose bytes are `b` (`type` is its first field).
    pub fn of_params(b: &[u8]) -> NodeType {
        NodeType::from_u32(get_u32(b, 0))
    }

    /// Name for messages, as in `CUgraphNodeType` (`CU_GRAPH_NODE_TYPE_KERNEL` → `kernel`).
    pub fn name(self) -> String {
        let s = match self {
            NodeType::Kernel => "kernel",
            NodeType::Memcpy => "memcpy",
            NodeType::Memset => "memset",
            NodeType::Host => "host",
            NodeType::ChildGraph => "child graph",
            NodeType::Empty => "empty",
            NodeType::WaitEvent => "event wait",
            NodeType::EventRecord => "event record",
            NodeType::ExtSemSignal => "external semaphore signal",
            NodeType::ExtSemWait => "external semaphore wait",
            NodeType::MemAlloc => "memory allocation",
            NodeType::MemFree => "memory free",
            NodeType::BatchMemOp => "batch memory operation",
            NodeType::Conditional => "conditional",
            NodeType::Other(v) => return format!("unknown type {v}"),
        };
        s.to_string()
    }
}

/// Size of `CUgraphNodeParams`: `type` (u32), 12 reserved bytes, a 232-byte union of the node
/// types' parameter structs, 8 reserved bytes.
pub const NODE_PARAMS_SIZE: usize = 256;
/// Offset of the union's member in `CUgraphNodeParams`.
pub const NODE_MEMBER_AT: usize = 16;
/// Conditional member (`CUDA_CONDITIONAL_NODE_PARAMS`): the handle, the count of body graphs,
/// where the driver writes them (`phGraph_out`) and the context (offsets in `CUgraphNodeParams`).
pub const NODE_COND_HANDLE_AT: usize = NODE_MEMBER_AT;
pub const NODE_COND_SIZE_AT: usize = NODE_MEMBER_AT + 12;
pub const NODE_COND_BODIES_AT: usize = NODE_MEMBER_AT + 16;
pub const NODE_COND_CTX_AT: usize = NODE_MEMBER_AT + 24;

/// A conditional node's body graphs in its `CUgraphNodeParams` bytes: (how many, where the
/// driver writes their handles, `phGraph_out`); `None` for any other node type.
pub fn conditional_bodies(b: &[u8]) -> Option<(usize, u64)> {
    if NodeType::of_params(b) != NodeType::Conditional {
        return None;
    }
    Some((get_u32(b, NODE_COND_SIZE_AT) as usize, get_u64(b, NODE_COND_BODIES_AT)))
}
/// Memcpy member (`CUDA_MEMCPY_NODE_PARAMS`): `copyCtx` and the `CUDA_MEMCPY3D` (offsets in
/// `CUgraphNodeParams`).
pub const NODE_MEMCPY_CTX_AT: usize = NODE_MEMBER_AT + 8;
/// See [`NODE_MEMCPY_CTX_AT`].
pub const NODE_MEMCPY_COPY_AT: usize = NODE_MEMBER_AT + 16;
/// Memset member (`CUDA_MEMSET_NODE_PARAMS_v2`): `dst`, `pitch`, `value`, `elementSize`,
/// `width`, `height`, `ctx` (offsets in `CUgraphNodeParams`).
pub const NODE_MEMSET_DST_AT: usize = NODE_MEMBER_AT;
/// See [`NODE_MEMSET_DST_AT`].
pub const NODE_MEMSET_PITCH_AT: usize = NODE_MEMBER_AT + 8;
/// See [`NODE_MEMSET_DST_AT`].
pub const NODE_MEMSET_ELEMENT_SIZE_AT: usize = NODE_MEMBER_AT + 20;
/// See [`NODE_MEMSET_DST_AT`].
pub const NODE_MEMSET_WIDTH_AT: usize = NODE_MEMBER_AT + 24;
/// See [`NODE_MEMSET_DST_AT`].
pub const NODE_MEMSET_HEIGHT_AT: usize = NODE_MEMBER_AT + 32;
/// See [`NODE_MEMSET_DST_AT`].
pub const NODE_MEMSET_CTX_AT: usize = NODE_MEMBER_AT + 40;
/// Event wait and event record members: the `CUevent` (offset in `CUgraphNodeParams`).
pub const NODE_EVENT_AT: usize = NODE_MEMBER_AT;

/// The memset a `CUgraphNodeParams` of type [`NodeType::Memset`] describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemsetNode {
    /// Destination (device address).
    pub dst: u64,
    /// Bytes between rows.
    pub pitch: u64,
    /// Bytes per element (1, 2 or 4).
    pub element_size: u32,
    /// Elements per row and rows.
    pub width: u64,
    /// See `width`.
    pub height: u64,
}

impl MemsetNode {
    /// Reads the memset member of `CUgraphNodeParams` bytes (`None` if too short).
    pub fn parse(b: &[u8]) -> Option<MemsetNode> {
        if b.len() < NODE_MEMSET_CTX_AT + 8 {
            return None;
        }
        Some(MemsetNode {
            dst: get_u64(b, NODE_MEMSET_DST_AT),
            pitch: get_u64(b, NODE_MEMSET_PITCH_AT),
            element_size: get_u32(b, NODE_MEMSET_ELEMENT_SIZE_AT),
            width: get_u64(b, NODE_MEMSET_WIDTH_AT),
            height: get_u64(b, NODE_MEMSET_HEIGHT_AT),
        })
    }

    /// Bytes from `dst` to the end of the last row (`None` on overflow).
    pub fn extent(&self) -> Option<u64> {
        let row = self.width.checked_mul(u64::from(self.element_size))?;
        self.height.max(1).checked_sub(1)?.checked_mul(self.pitch)?.checked_add(row)
    }
}

/// A struct inside a tagged union that the recorder captures as it captures that struct when it
/// is an argument of its own: its pointers lead to bytes the trace must hold (kernel
/// parameters, the host side of a copy).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Embedded {
    /// Offset of the member in the union struct.
    pub at: usize,
    /// C type of the member, as the API table names it.
    pub c_struct: &'static str,
}

/// For a tagged union struct named in the API table (`CUgraphNodeParams`): the member its tag
/// selects, when that member must be captured beyond its bytes. A trace stores such an
/// argument as `[union bytes, member as captured]`; other members are plain data, stored in the
/// union's bytes alone. `None` for every other struct.
pub fn embedded(c_struct: &str, bytes: &[u8]) -> Option<Embedded> {
    if c_struct != "CUgraphNodeParams" {
        return None;
    }
    match NodeType::of_params(bytes) {
        NodeType::Kernel => Some(Embedded { at: NODE_MEMBER_AT, c_struct: "CUDA_KERNEL_NODE_PARAMS" }),
        NodeType::Memcpy => Some(Embedded { at: NODE_MEMCPY_COPY_AT, c_struct: "CUDA_MEMCPY3D" }),
        _ => None,
    }
}

/// Whether a struct named in the API table is a tagged union that [`embedded`] describes.
pub fn is_tagged(c_struct: &str) -> bool {
    c_struct == "CUgraphNodeParams"
}

#[cfg(test)]
mod tests {
    use super::*;

    fn copy3d() -> Vec<u8> {
        let mut b = vec![0u8; Dims::Three.size()];
        let src = Side {
            memory_type: MEMORYTYPE_HOST,
            host: 0x1000,
            x: 4,
            y: 1,
            z: 1,
            pitch: 100,
            height: 3,
            ..Side::default()
        };
        let dst = Side { memory_type: MEMORYTYPE_ARRAY, array: 0xabc, ..Side::default() };
        Copy::write_side(Dims::Three, &mut b, false, &src);
        Copy::write_side(Dims::Three, &mut b, true, &dst);
        b[176..184].copy_from_slice(&8u64.to_le_bytes());
        b[184..192].copy_from_slice(&2u64.to_le_bytes());
        b[192..200].copy_from_slice(&2u64.to_le_bytes());
        b
    }

    #[test]
    fn copy_sides_round_trip_and_rows_follow_the_pitch() {
        let b = copy3d();
        let c = Copy::parse(Dims::Three, &b).unwrap();
        assert_eq!((c.width, c.height, c.depth), (8, 2, 2));
        assert_eq!(c.src.memory_type, MEMORYTYPE_HOST);
        assert_eq!(c.dst.array, 0xabc);
        assert_eq!(c.packed_len(), Some(32));
        // start = 0x1000 + z·pitch·height + y·pitch + x = 0x1000 + 300 + 100 + 4
        let rows: Vec<u64> = c.rows(&c.src).collect();
        assert_eq!(rows, [0x1000 + 404, 0x1000 + 504, 0x1000 + 704, 0x1000 + 804]);
        let p = c.packed_side(0x5000);
        let mut b2 = b.clone();
        Copy::write_side(Dims::Three, &mut b2, false, &p);
        let c2 = Copy::parse(Dims::Three, &b2).unwrap();
        assert_eq!(c2.rows(&c2.src).collect::<Vec<_>>(), [0x5000, 0x5008, 0x5010, 0x5018]);
        assert!(Copy::parse(Dims::Two, &b[..100]).is_none());
    }

    #[test]
    fn resource_and_kernel_node() {
        let mut r = vec![0u8; 144];
        r[0] = RESOURCE_PITCH2D as u8;
        set_resource(&mut r, 0x7e00_0000_0000);
        assert_eq!(resource(&r), Resource::Memory(0x7e00_0000_0000));
        r[0] = 0;
        assert_eq!(resource(&r), Resource::Array(0x7e00_0000_0000));
        let mut k = vec![0u8; 72];
        k[56..64].copy_from_slice(&0x55u64.to_le_bytes());
        k[8..12].copy_from_slice(&7u32.to_le_bytes());
        let n = KernelNode::parse(&k).unwrap();
        assert_eq!((n.handle(), n.grid[0]), (0x55, 7));
        assert_eq!(KernelNode::parse(&k[..56]).unwrap().handle(), 0);
    }

    #[test]
    fn a_kernel_node_written_reads_back_in_both_versions() {
        let n = KernelNode {
            func: 0x10,
            grid: [1, 2, 3],
            block: [4, 5, 6],
            shared_mem: 7,
            kernel_params: 0x7000,
            extra: 0,
            kern: 0x20,
            ctx: 0x30,
        };
        let mut v2 = vec![0xeeu8; 72];
        n.write(&mut v2);
        assert_eq!(KernelNode::parse(&v2), Some(n));
        assert_eq!(&v2[36..40], &[0xee; 4], "padding untouched");
        let mut v1 = vec![0u8; KERNEL_NODE_V1];
        n.write(&mut v1);
        assert_eq!(KernelNode::parse(&v1), Some(KernelNode { kern: 0, ctx: 0, ..n }), "v1 has no kern or ctx");
    }

    #[test]
    fn node_params_tag_selects_the_member() {
        let mut b = vec![0u8; NODE_PARAMS_SIZE];
        assert_eq!(NodeType::of_params(&b), NodeType::Kernel);
        let k = embedded("CUgraphNodeParams", &b).unwrap();
        assert_eq!((k.at, k.c_struct), (16, "CUDA_KERNEL_NODE_PARAMS"));
        b[0] = 1;
        let m = embedded("CUgraphNodeParams", &b).unwrap();
        assert_eq!((m.at, m.c_struct), (32, "CUDA_MEMCPY3D"));
        assert!(embedded("CUDA_MEMCPY3D", &b).is_none(), "not a tagged union");
        b[0] = 2;
        assert!(embedded("CUgraphNodeParams", &b).is_none(), "a memset is plain data");
        put_u64(&mut b, NODE_MEMSET_DST_AT, 0x7e00_0000_1000);
        put_u64(&mut b, NODE_MEMSET_PITCH_AT, 4096);
        put_u32(&mut b, NODE_MEMSET_ELEMENT_SIZE_AT, 4);
        put_u64(&mut b, NODE_MEMSET_WIDTH_AT, 100);
        put_u64(&mut b, NODE_MEMSET_HEIGHT_AT, 3);
        let ms = MemsetNode::parse(&b).unwrap();
        assert_eq!((ms.dst, ms.extent()), (0x7e00_0000_1000, Some(2 * 4096 + 400)));
        assert!(MemsetNode::parse(&b[..60]).is_none());
        b[0] = 3;
        assert_eq!(NodeType::of_params(&b).name(), "host");
        b[0] = 99;
        assert_eq!(NodeType::of_params(&b), NodeType::Other(99));
        assert_eq!(NodeType::of_params(&b).name(), "unknown type 99");
    }
}
