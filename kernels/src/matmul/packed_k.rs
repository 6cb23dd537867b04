//! Packed layouts of Q4_K, Q5_K, Q6_K and Q5_0 (the formats of llama.cpp's Q4_K_M files and of
//! their fallbacks for rows that are not a multiple of 256).
//!
//! All four keep the 8-row panels and the Q4_0 nibble records of [`super`]: per (panel,
//! 32-block), vector `v = 0..4` holds in lane `i` (row `8p+i`) 4 bytes whose low nibbles
//! are the low 4 bits of elements `4v..4v+4` and whose high nibbles those of elements
//! `16+4v..16+4v+4` of that 32-block. Sub-block scales are decoded **once, here**, so the
//! kernels pair the weights with the ordinary per-32 int8 activation
//! ([`crate::matmul::QuantizedActivation`]) instead of q8_K:
//!
//! * **Q4_K** (128 code bytes per 32-block = one sub-block; 4.625 bpw packed vs 4.5 in
//!   the file). The GGUF pairs sub-blocks `2j`/`2j+1` in one byte; here each sub-block
//!   gets its own Q4_0-style record. Scale group per (panel, 256-super-block), 80 u16 =
//!   160 bytes: `[d; 8]` fp16, `[dmin; 8]` fp16, then bytes `sc[s][row]` (u8, 6-bit,
//!   s = 0..8) and `m[s][row]`. Kernel: `Σ_s da_s·(d·sc_s·Σqa − dmin·m_s·Σa)` with
//!   `sc_s·Σqa` exact in int32 (the scale rides in `vpmaddwd`) and `da_s·Σa` from the
//!   activation's per-block `d·Σq`.
//! * **Q5_K** (160 bytes per 32-block: the Q5_0 record below; 5.625 bpw packed vs 5.5 in
//!   the file). Scale group as Q4_K; codes unsigned 0..=31, so the kernel is Q4_K's.
//! * **Q6_K** (192 bytes per 32-block: 128 nibble bytes, then two 32-byte planes `H_lo`,
//!   `H_hi`; 6.5625 bpw, as in the file). Lane `i` byte `k` of `H_lo` holds in bits
//!   `2v..2v+2` the top 2 bits of element `4v+k`; `H_hi` the same for `16+4v+k`. The
//!   32-block's low nibbles are exactly sub-block `2j`, its high nibbles sub-block `2j+1`.
//!   Scale group per (panel, super-block), 72 u16 = 144 bytes: `[d; 8]` fp16, then per
//!   32-block `j` 16 bytes `(sc[2j], sc[2j+1])` for rows 0..8 (i8). The `−32` offset is
//!   folded exactly through the activation's per-16 sums (`32·(sc_lo·S_lo + sc_hi·S_hi)`).
//! * **Q5_0** (160 bytes per 32-block: 128 nibble bytes, then one plane `H`; 5.5 bpw as in
//!   the file). Lane `i` byte `k` of `H`: bit `v` = 5th bit of element `4v+k`, bit `4+v`
//!   = 5th bit of element `16+4v+k`. Scales `[d; 8]` fp16 per 32-block. The `−16` is
//!   folded through `16·Σa`. (A byte-per-element form would be the Q8_0 layout at 8.5
//!   bpw: 55% more bytes for a bandwidth-bound gemv; the bit plane costs a few shifts.)

use super::{Layout, PackedMatrix, QK};

/// u16 units of the scale stream per (panel, Q4_K super-block).
pub(crate) const Q4K_SCALE_U16: usize = 80;
/// u16 units of the scale stream per (panel, Q6_K super-block).
pub(crate) const Q6K_SCALE_U16: usize = 72;

fn f16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

/// The unsigned codes (Q4_K 0..=15, Q5_K 0..=31, Q6_K 0..=63) of a 256-element super-block.
fn kquant_codes(layout: Layout, blk: &[u8]) -> [u8; 256] {
    let mut q = [0u8; 256];
    match layout {
        Layout::Q4_K => {
            let qs = &blk[16..144];
            for s in 0..8 {
                for l in 0..32 {
                    let byte = qs[32 * (s / 2) + l];
                    q[32 * s + l] = if s % 2 == 0 { byte & 15 } else { byte >> 4 };
                }
            }
        }
        Layout::Q5_K => {
            let (qh, qs) = (&blk[16..48], &blk[48..176]);
            for i in 0..4 {
                for l in 0..32 {
                    let (byte, h) = (qs[32 * i + l], qh[l] >> (2 * i));
                    q[64 * i + l] = (byte & 15) | (h & 1) << 4;
                    q[64 * i + 32 + l] = (byte >> 4) | (h & 2) << 3;
                }
            }
        }
        Layout::Q6_K => {
            let (ql, qh) = (&blk[0..128], &blk[128..192]);
            for h in 0..2 {
                for l in 0..32 {
                    let (a, b, hb) = (ql[64 * h + l], ql[64 * h + l + 32], qh[32 * h + l]);
                    let e = 128 * h + l;
                    q[e] = (a & 15) | (hb & 3) << 4;
                    q[e + 32] = (b & 15) | ((hb >> 2) & 3) << 4;
                    q[e + 64] = (a >> 4) | ((hb >> 4) & 3) << 4;
                    q[e + 96] = (b >> 4) | ((hb >> 6) & 3) << 4;
                }
            }
        }
        _ => unreachable!(),
    }
    q
}

/// Writes the record of one 32-block of row `i` (codes `c`, unsigned) into `dst`.
fn write_record(layout: Layout, dst: &mut [u8], i: usize, c: &[u8]) {
    for v in 0..4 {
        for k in 0..4 {
            dst[v * 32 + i * 4 + k] = (c[4 * v + k] & 15) | (c[16 + 4 * v + k] & 15) << 4;
        }
    }
    match layout {
        Layout::Q6_K => {
            for k in 0..4 {
                let (mut lo, mut hi) = (0u8, 0u8);
                for v in 0..4 {
                    lo |= ((c[4 * v + k] >> 4) & 3) << (2 * v);
                    hi |= ((c[16 + 4 * v + k] >> 4) & 3) << (2 * v);
                }
                dst[128 + i * 4 + k] = lo;
                dst[160 + i * 4 + k] = hi;
            }
        }
        Layout::Q5_0 | Layout::Q5_K => {
            for k in 0..4 {
                let mut h = 0u8;
                for v in 0..4 {
                    h |= ((c[4 * v + k] >> 4) & 1) << v;
                    h |= ((c[16 + 4 * v + k] >> 4) & 1) << (4 + v);
                }
                dst[128 + i * 4 + k] = h;
            }
        }
        _ => {}
    }
}

/// Reads back the 32 unsigned codes of row `i` from a record, in element order (Q4:
/// nibbles; Q5_0 / Q5_K: 5-bit, Q6_K: 6-bit with their plane bits).
pub(in crate::matmul) fn read_record(layout: Layout, rec: &[u8], i: usize) -> [u8; 32] {
    let mut c = [0u8; 32];
    for v in 0..4 {
        for k in 0..4 {
            let byte = rec[v * 32 + i * 4 + k];
            let (e0, e1) = (4 * v + k, 16 + 4 * v + k);
            c[e0] = byte & 15;
            c[e1] = byte >> 4;
            match layout {
                Layout::Q6_K => {
                    c[e0] |= ((rec[128 + i * 4 + k] >> (2 * v)) & 3) << 4;
                    c[e1] |= ((rec[160 + i * 4 + k] >> (2 * v)) & 3) << 4;
                }
                Layout::Q5_0 | Layout::Q5_K => {
                    let h = rec[128 + i * 4 + k];
                    c[e0] |= ((h >> v) & 1) << 4;
                    c[e1] |= ((h >> (4 + v)) & 1) << 4;
                }
                _ => {}
            }
        }
    }
    c
}

impl PackedMatrix {
    /// [`PackedMatrix::fill_panel`] for the layouts of this module.
    pub(super) fn fill_panel_k(&mut self, p: usize, srcs: &[Option<&[u8]>]) {
        let layout = self.layout;
        let nb = self.nb;
        let qb = layout.quant_bytes_per_block();
        let spg = layout.scales_per_group();
        let ng = nb / layout.blocks_per_group();
        let qs = self.qs.as_mut_slice();
        let panel = &mut qs[p * nb * qb..(p + 1) * nb * qb];
        let sc16 = &mut self.scales[p * ng * spg..(p + 1) * ng * spg];
        for (i, src) in srcs.iter().enumerate() {
            let Some(src) = src else { continue };
            match layout {
                Layout::Q5_0 => {
                    for (b, blk) in src.chunks_exact(22).enumerate() {
                        let qh = [blk[2], blk[3], blk[4], blk[5]];
                        let qs: &[u8; 16] = blk[6..22].try_into().unwrap();
                        let c = crate::formats::q5_0::codes(qh, qs);
                        write_record(layout, &mut panel[b * qb..(b + 1) * qb], i, &c);
                        sc16[b * 8 + i] = f16_at(blk, 0);
                    }
                }
                Layout::Q4_K | Layout::Q5_K | Layout::Q6_K => {
                    let bb = match layout {
                        Layout::Q4_K => 144,
                        Layout::Q5_K => 176,
                        _ => 210,
                    };
                    for (g, blk) in src.chunks_exact(bb).enumerate() {
                        let c = kquant_codes(layout, blk);
                        for j in 0..8 {
                            let b = 8 * g + j;
                            let rec = &mut panel[b * qb..(b + 1) * qb];
                            write_record(layout, rec, i, &c[32 * j..32 * j + 32]);
                        }
                        let grp = &mut sc16[g * spg..(g + 1) * spg];
                        if layout != Layout::Q6_K {
                            grp[i] = f16_at(blk, 0);
                            grp[8 + i] = f16_at(blk, 2);
                            let packed: &[u8; 12] = blk[4..16].try_into().unwrap();
                            let bytes: &mut [u8] = bytemuck::cast_slice_mut(grp);
                            for s in 0..8 {
                                let (sc, m) = crate::formats::kquant::scale_min_k4(s, packed);
                                bytes[32 + 8 * s + i] = sc;
                                bytes[96 + 8 * s + i] = m;
                            }
                        } else {
                            grp[i] = f16_at(blk, 208);
                            let bytes: &mut [u8] = bytemuck::cast_slice_mut(grp);
                            for j in 0..8 {
                                bytes[16 + 16 * j + 2 * i] = blk[192 + 2 * j];
                                bytes[16 + 16 * j + 2 * i + 1] = blk[192 + 2 * j + 1];
                            }
                        }
                    }
                }
                _ => unreachable!(),
            }
        }
    }

    /// [`PackedMatrix::dequant_internal`] for the layouts of this module.
    pub(super) fn dequant_internal_k(&self, p: usize, i: usize) -> Vec<f32> {
        let layout = self.layout;
        let q = self.panel_quants(p);
        let s = self.panel_scales(p);
        let qb = layout.quant_bytes_per_block();
        let spg = layout.scales_per_group();
        let h = |bits: u16| half::f16::from_bits(bits).to_f32();
        let mut out = vec![0f32; self.cols];
        for b in 0..self.nb {
            let c = read_record(layout, &q[b * qb..(b + 1) * qb], i);
            let o = &mut out[b * QK..(b + 1) * QK];
            match layout {
                Layout::Q5_0 => {
                    let d = h(s[b * 8 + i]);
                    for e in 0..QK {
                        o[e] = (c[e] as i32 - 16) as f32 * d;
                    }
                }
                Layout::Q4_K | Layout::Q5_K => {
                    let grp = &s[(b / 8) * spg..(b / 8 + 1) * spg];
                    let bytes: &[u8] = bytemuck::cast_slice(grp);
                    let j = b % 8;
                    let dl = h(grp[i]) * bytes[32 + 8 * j + i] as f32;
                    let ml = h(grp[8 + i]) * bytes[96 + 8 * j + i] as f32;
                    for e in 0..QK {
                        o[e] = dl * c[e] as f32 - ml;
                    }
                }
                Layout::Q6_K => {
                    let grp = &s[(b / 8) * spg..(b / 8 + 1) * spg];
                    let bytes: &[u8] = bytemuck::cast_slice(grp);
                    let j = b % 8;
                    let d = h(grp[i]);
                    for e in 0..QK {
                        let sc = bytes[16 + 16 * j + 2 * i + e / 16] as i8;
                        o[e] = d * sc as f32 * (c[e] as i32 - 32) as f32;
                    }
                }
                _ => unreachable!(),
            }
        }
        out
    }
}
