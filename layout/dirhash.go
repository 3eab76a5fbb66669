package layout

import "math/bits"

// Directory hash versions (dx_root_info.hash_version, s_def_hash_version).
// Part of the on-disk format.
const (
	HashLegacy          = 0
	HashHalfMD4         = 1
	HashTea             = 2
	HashLegacyUnsigned  = 3
	HashHalfMD4Unsigned = 4
	HashTeaUnsigned     = 5
	HashSiphash         = 6

	htreeEOF32 = 0x7FFFFFFF // EXT4_HTREE_EOF_32BIT
)

// DirHash computes ext4's directory hash of name (ext4fs_dirhash) with
// the given version (already adjusted for unsigned chars) and the
// superblock's s_hash_seed. It returns the major hash (low bit clear) and
// the minor hash. ok is false for versions ext4io does not implement
// (siphash, used only by casefolded encrypted directories).
func DirHash(version uint8, seed [4]uint32, name []byte) (hash, minor uint32, ok bool) {
	buf := [4]uint32{0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476}
	if seed != ([4]uint32{}) {
		buf = seed
	}
	unsigned := false
	switch version {
	case HashLegacyUnsigned:
		unsigned = true
		fallthrough
	case HashLegacy:
		hash = dxHackHash(name, unsigned)
	case HashHalfMD4Unsigned:
		unsigned = true
		fallthrough
	case HashHalfMD4:
		var in [8]uint32
		for p := name; len(p) > 0; p = p[32:] {
			str2hashbuf(p, in[:], unsigned)
			halfMD4Transform(&buf, &in)
			if len(p) <= 32 {
				break
			}
		}
		hash, minor = buf[1], buf[2]
	case HashTeaUnsigned:
		unsigned = true
		fallthrough
	case HashTea:
		var in [4]uint32
		for p := name; len(p) > 0; p = p[16:] {
			str2hashbuf(p, in[:], unsigned)
			teaTransform(&buf, &in)
			if len(p) <= 16 {
				break
			}
		}
		hash, minor = buf[0], buf[1]
	default:
		return 0, 0, false
	}
	hash &^= 1
	if hash == htreeEOF32<<1 {
		hash = (htreeEOF32 - 1) << 1
	}
	return hash, minor, true
}

func dxHackHash(name []byte, unsigned bool) uint32 {
	h0, h1 := uint32(0x12a3fe2d), uint32(0x37abe8f9)
	for _, c := range name {
		v := uint32(int32(int8(c)))
		if unsigned {
			v = uint32(c)
		}
		h := h1 + (h0 ^ v*7152373)
		if h&0x80000000 != 0 {
			h -= 0x7fffffff
		}
		h1, h0 = h0, h
	}
	return h0 << 1
}

// str2hashbuf packs up to 4*len(out) bytes of msg into out, padding with
// the length as the kernel does (str2hashbuf_signed / _unsigned).
func str2hashbuf(msg []byte, out []uint32, unsigned bool) {
	n := len(msg)
	pad := uint32(n) | uint32(n)<<8
	pad |= pad << 16
	val := pad
	if n > 4*len(out) {
		n = 4 * len(out)
	}
	j := 0
	for i := 0; i < n; i++ {
		c := uint32(int32(int8(msg[i])))
		if unsigned {
			c = uint32(msg[i])
		}
		val = c + val<<8
		if i%4 == 3 {
			out[j] = val
			j++
			val = pad
		}
	}
	if j < len(out) {
		out[j] = val
		j++
	}
	for ; j < len(out); j++ {
		out[j] = pad
	}
}

func halfMD4Transform(buf *[4]uint32, in *[8]uint32) {
	a, b, c, d := buf[0], buf[1], buf[2], buf[3]
	f := func(x, y, z uint32) uint32 { return z ^ (x & (y ^ z)) }
	g := func(x, y, z uint32) uint32 { return (x & y) + ((x ^ y) & z) }
	h := func(x, y, z uint32) uint32 { return x ^ y ^ z }
	const k2, k3 = 0x5A827999, 0x6ED9EBA1
	round := func(fn func(x, y, z uint32) uint32, a, b, c, d, x uint32, s int) uint32 {
		return bits.RotateLeft32(a+fn(b, c, d)+x, s)
	}
	a = round(f, a, b, c, d, in[0], 3)
	d = round(f, d, a, b, c, in[1], 7)
	c = round(f, c, d, a, b, in[2], 11)
	b = round(f, b, c, d, a, in[3], 19)
	a = round(f, a, b, c, d, in[4], 3)
	d = round(f, d, a, b, c, in[5], 7)
	c = round(f, c, d, a, b, in[6], 11)
	b = round(f, b, c, d, a, in[7], 19)

	a = round(g, a, b, c, d, in[1]+k2, 3)
	d = round(g, d, a, b, c, in[3]+k2, 5)
	c = round(g, c, d, a, b, in[5]+k2, 9)
	b = round(g, b, c, d, a, in[7]+k2, 13)
	a = round(g, a, b, c, d, in[0]+k2, 3)
	d = round(g, d, a, b, c, in[2]+k2, 5)
	c = round(g, c, d, a, b, in[4]+k2, 9)
	b = round(g, b, c, d, a, in[6]+k2, 13)

	a = round(h, a, b, c, d, in[3]+k3, 3)
	d = round(h, d, a, b, c, in[7]+k3, 9)
	c = round(h, c, d, a, b, in[2]+k3, 11)
	b = round(h, b, c, d, a, in[6]+k3, 15)
	a = round(h, a, b, c, d, in[1]+k3, 3)
	d = round(h, d, a, b, c, in[5]+k3, 9)
	c = round(h, c, d, a, b, in[0]+k3, 11)
	b = round(h, b, c, d, a, in[4]+k3, 15)

	buf[0] += a
	buf[1] += b
	buf[2] += c
	buf[3] += d
}

func teaTransform(buf *[4]uint32, in *[4]uint32) {
	const delta = 0x9E3779B9
	var sum uint32
	b0, b1 := buf[0], buf[1]
	a, b, c, d := in[0], in[1], in[2], in[3]
	for range 16 {
		sum += delta
		b0 += ((b1 << 4) + a) ^ (b1 + sum) ^ ((b1 >> 5) + b)
		b1 += ((b0 << 4) + c) ^ (b0 + sum) ^ ((b0 >> 5) + d)
	}
	buf[0] += b0
	buf[1] += b1
}
