package layout

import (
	"bytes"
	"errors"
	"testing"
)

// TestMMPSize pins the struct's size and field offsets to struct mmp_struct.
func TestMMPSize(t *testing.T) {
	if MMPSize != 1024 || mmpChecksumOff != MMPSize-4 {
		t.Fatalf("MMPSize %d, checksum at %#x", MMPSize, mmpChecksumOff)
	}
	if 0x10+mmpNodenameLen != 0x50 || 0x50+mmpBdevnameLen != 0x70 {
		t.Fatal("name fields do not tile 0x10..0x70")
	}
}

// TestMMPFromMkfs decodes the MMP block mkfs.ext4 -O mmp writes (P1, P2),
// re-encodes it byte for byte and recomputes its checksum.
func TestMMPFromMkfs(t *testing.T) {
	for _, tt := range []struct {
		name string
		args []string
	}{
		{"csum1k", []string{"-b", "1024", "-O", "mmp,metadata_csum", "-E", "mmp_update_interval=1"}},
		{"csum4k", []string{"-b", "4096", "-O", "mmp,metadata_csum,metadata_csum_seed"}},
		{"nocsum", []string{"-b", "4096", "-O", "mmp,^metadata_csum", "-E", "mmp_update_interval=7"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			img := mkfs(t, "32M", tt.args...)
			sb, err := DecodeSuperblock(img[SuperblockOffset:])
			if err != nil {
				t.Fatal(err)
			}
			if !sb.HasIncompat(IncompatMMP) || sb.MmpBlock == 0 {
				t.Fatalf("mmp feature %v, block %d", sb.HasIncompat(IncompatMMP), sb.MmpBlock)
			}
			bs := sb.BlockSize()
			raw := img[int(sb.MmpBlock)*bs:][:bs]
			m, err := DecodeMMP(raw, sb.MmpBlock)
			if err != nil {
				t.Fatal(err)
			}
			if err := m.VerifyChecksum(sb.MetadataCsum(), sb.CsumSeed(), sb.MmpBlock); err != nil {
				t.Fatal(err)
			}
			if m.Seq != MMPSeqClean {
				t.Fatalf("seq %#x, want clean", m.Seq)
			}
			if want := max(sb.MmpInterval, MMPMinCheckInterval); m.CheckInterval != want {
				t.Fatalf("check interval %d, want %d (update interval %d)", m.CheckInterval, want, sb.MmpInterval)
			}
			if !bytes.Equal(m.Encode(), raw[:MMPSize]) {
				t.Fatal("MMP block does not re-encode identically")
			}
			save := m.Checksum
			m.SetChecksum(sb.MetadataCsum(), sb.CsumSeed())
			if m.Checksum != save {
				t.Fatalf("SetChecksum %#x, mkfs wrote %#x", m.Checksum, save)
			}
			if sb.MetadataCsum() {
				m.Seq = 42
				m.Encode()
				if err := m.VerifyChecksum(true, sb.CsumSeed(), sb.MmpBlock); !errors.Is(err, ErrCorrupt) {
					t.Fatalf("changed seq without checksum: %v", err)
				}
			}
		})
	}
}

func TestMMPRoundTrip(t *testing.T) {
	m := NewMMP(1, 1796417043, "node-with-a-name", "a-device-name-longer-than-thirty-two-bytes")
	if m.CheckInterval != MMPMinCheckInterval {
		t.Fatalf("check interval %d", m.CheckInterval)
	}
	if got := m.BdevnameString(); got != "a-device-name-longer-than-thirty" {
		t.Fatalf("bdevname %q", got)
	}
	m.Seq = 0x1234
	m.SetChecksum(true, 0xdeadbeef)
	d, err := DecodeMMP(m.Raw[:], 9)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.VerifyChecksum(true, 0xdeadbeef, 9); err != nil {
		t.Fatal(err)
	}
	if d.Seq != 0x1234 || d.Time != 1796417043 || d.NodenameString() != "node-with-a-name" || d.CheckInterval != 5 {
		t.Fatalf("decoded %+v", d)
	}
	if !bytes.Equal(d.Encode(), m.Raw[:]) {
		t.Fatal("round trip changed bytes")
	}
	m.Raw[0] ^= 1
	if _, err := DecodeMMP(m.Raw[:], 9); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("bad magic: %v", err)
	}
	if _, err := DecodeMMP(m.Raw[:100], 9); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("short: %v", err)
	}
}

func FuzzMMP(f *testing.F) {
	m := NewMMP(5, 1, "host", "dev")
	m.SetChecksum(true, 1)
	f.Add(append([]byte(nil), m.Raw[:]...))
	m.Seq = MMPSeqFsck
	m.SetChecksum(false, 0)
	f.Add(append([]byte(nil), m.Raw[:]...))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := DecodeMMP(b, 1)
		if err != nil {
			return
		}
		_ = d.VerifyChecksum(true, 1, 1)
		_ = d.NodenameString() + d.BdevnameString()
		if !bytes.Equal(d.Encode(), b[:MMPSize]) {
			t.Fatal("decoded MMP block does not re-encode identically")
		}
	})
}
