package layout

import (
	"encoding/binary"

	"github.com/ext4io/ext4io/internal/crc32c"
	"github.com/ext4io/ext4io/internal/errs"
)

// Multiple mount protection (the mmp incompat feature). The superblock's
// s_mmp_block (0x168) names one block whose first 1024 bytes hold an
// mmp_struct; s_mmp_update_interval (0x166) is how often, in seconds, the
// node using the filesystem rewrites it.
//
// MMP block (struct mmp_struct, little-endian):
//
//	0x000 mmp_magic           __le32  0x004D4D50 ("MMP")
//	0x004 mmp_seq             __le32  sequence, see MMPSeq*
//	0x008 mmp_time            __le64  seconds of the last update
//	0x010 mmp_nodename[64]    char    host that last updated the block
//	0x050 mmp_bdevname[32]    char    device name it used
//	0x070 mmp_check_interval  __le16  seconds; how long others must wait
//	0x072 mmp_pad1            __le16
//	0x074 mmp_pad2[226]       __le32
//	0x3FC mmp_checksum        __le32  crc32c(csum seed, bytes 0..0x3FB), metadata_csum only
//
// Invariants checked on decode:
//
//	P1 mmp_magic == MMPMagic
//	P2 with metadata_csum, mmp_checksum matches (VerifyChecksum)
//
// Only mmp_seq decides anything; time and names are for the administrator.

// MMP constants. Part of the on-disk format (and of the protocol Linux and
// e2fsprogs follow); must not change.
const (
	MMPSize     = 1024       // bytes of the struct; the rest of the block is not used
	MMPMagic    = 0x004D4D50 // mmp_magic
	MMPSeqClean = 0xFF4D4D50 // mmp_seq: nobody uses the filesystem
	MMPSeqFsck  = 0xE24D4D50 // mmp_seq: e2fsck (or another e2fsprogs writer) has it
	MMPSeqMax   = 0xE24D4D4F // largest sequence a user writes while it holds the filesystem

	MMPUpdateInterval    = 5   // default s_mmp_update_interval, seconds
	MMPMaxUpdateInterval = 300 // largest s_mmp_update_interval mkfs accepts
	MMPMinCheckInterval  = 5   // check intervals are never shorter, seconds
	MMPMaxCheckInterval  = 300 // nor longer, seconds
	MMPCheckMult         = 2   // check interval = MMPCheckMult * update interval

	mmpNodenameLen = 64
	mmpBdevnameLen = 32
	mmpChecksumOff = 0x3FC
)

// Sequence numbers are below the special values: the relation the protocol
// relies on (a fresh random sequence is never CLEAN or FSCK).
const _ = uint32(MMPSeqFsck - MMPSeqMax - 1)

// MMP mirrors struct mmp_struct. Nodename and Bdevname are NUL-padded,
// not necessarily NUL-terminated. Raw keeps the decoded bytes, so the
// padding survives a round trip.
//
// An MMP is a plain value; it is not safe for concurrent mutation.
type MMP struct {
	Magic         uint32   // 0x00
	Seq           uint32   // 0x04
	Time          uint64   // 0x08
	Nodename      [64]byte // 0x10
	Bdevname      [32]byte // 0x50
	CheckInterval uint16   // 0x70
	Checksum      uint32   // 0x3FC

	Raw [MMPSize]byte
}

// DecodeMMP decodes an MMP block (its first MMPSize bytes) and checks its
// magic (P1). It does not verify the checksum; see VerifyChecksum.
func DecodeMMP(b []byte, block uint64) (*MMP, error) {
	if len(b) < MMPSize {
		return nil, errs.Corruptf("MMP block", block, -1, "short buffer: %d bytes", len(b))
	}
	m := &MMP{}
	copy(m.Raw[:], b[:MMPSize])
	le := binary.LittleEndian
	r := m.Raw[:]
	m.Magic = le.Uint32(r[0x00:])
	m.Seq = le.Uint32(r[0x04:])
	m.Time = le.Uint64(r[0x08:])
	copy(m.Nodename[:], r[0x10:0x10+mmpNodenameLen])
	copy(m.Bdevname[:], r[0x50:0x50+mmpBdevnameLen])
	m.CheckInterval = le.Uint16(r[0x70:])
	m.Checksum = le.Uint32(r[mmpChecksumOff:])
	if m.Magic != MMPMagic {
		return nil, errs.Corruptf("MMP block", block, 0, "magic %#x != %#x", m.Magic, uint32(MMPMagic))
	}
	return m, nil
}

// NewMMP returns a clean MMP block (sequence MMPSeqClean) for a filesystem
// whose s_mmp_update_interval is update, as mkfs.ext4 writes it.
func NewMMP(update uint16, now uint64, nodename, bdevname string) *MMP {
	m := &MMP{Magic: MMPMagic, Seq: MMPSeqClean, Time: now, CheckInterval: max(update, MMPMinCheckInterval)}
	m.SetNames(nodename, bdevname)
	return m
}

// SetNames stores nodename and bdevname, truncated to their fields and
// NUL-padded.
func (m *MMP) SetNames(nodename, bdevname string) {
	m.Nodename, m.Bdevname = [64]byte{}, [32]byte{}
	copy(m.Nodename[:], nodename)
	copy(m.Bdevname[:], bdevname)
}

// NodenameString returns the node name up to its first NUL.
func (m *MMP) NodenameString() string { return cString(m.Nodename[:]) }

// BdevnameString returns the device name up to its first NUL.
func (m *MMP) BdevnameString() string { return cString(m.Bdevname[:]) }

// Encode writes the fields into Raw and returns it. The checksum field is
// written as it stands; call SetChecksum to update it.
func (m *MMP) Encode() []byte {
	le := binary.LittleEndian
	r := m.Raw[:]
	le.PutUint32(r[0x00:], m.Magic)
	le.PutUint32(r[0x04:], m.Seq)
	le.PutUint64(r[0x08:], m.Time)
	copy(r[0x10:0x10+mmpNodenameLen], m.Nodename[:])
	copy(r[0x50:0x50+mmpBdevnameLen], m.Bdevname[:])
	le.PutUint16(r[0x70:], m.CheckInterval)
	le.PutUint32(r[mmpChecksumOff:], m.Checksum)
	return r
}

// MMPChecksum returns the checksum of the encoded block raw (at least
// MMPSize bytes), as ext4_mmp_csum computes it: crc32c seeded with the
// filesystem's checksum seed over the struct up to mmp_checksum.
func MMPChecksum(seed uint32, raw []byte) uint32 {
	return crc32c.Kernel(seed, raw[:mmpChecksumOff])
}

// SetChecksum encodes m and, with metadata_csum (csum), stores its
// checksum; without it the checksum field is left as it is (as the kernel
// leaves it).
func (m *MMP) SetChecksum(csum bool, seed uint32) {
	m.Encode()
	if csum {
		m.Checksum = MMPChecksum(seed, m.Raw[:])
		binary.LittleEndian.PutUint32(m.Raw[mmpChecksumOff:], m.Checksum)
	}
}

// VerifyChecksum checks the checksum (P2) when csum (metadata_csum) is on.
func (m *MMP) VerifyChecksum(csum bool, seed uint32, block uint64) error {
	if !csum {
		return nil
	}
	if want := MMPChecksum(seed, m.Raw[:]); want != m.Checksum {
		return errs.Corruptf("MMP block", block, mmpChecksumOff, "checksum %#x != computed %#x", m.Checksum, want)
	}
	return nil
}
