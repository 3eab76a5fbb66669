package mkfs

import (
	"os"

	"github.com/ext4io/ext4io/layout"
)

// mmpBdevname is the device name Format records in a new MMP block
// (mkfs.ext4 records the path it was given).
const mmpBdevname = "ext4io"

// makeMMP allocates and writes the MMP block when the mmp feature is on,
// as ext2fs_mmp_init does for mkfs.ext4: the first free block from the
// start of the filesystem, holding a clean mmp_struct (the rest of the
// block zero), named by s_mmp_block; s_mmp_update_interval defaults to 5 s.
func (f *formatter) makeMMP() error {
	sb := f.sb
	if !sb.HasIncompat(layout.IncompatMMP) {
		return nil
	}
	blk, err := f.p.allocContig(uint64(sb.FirstDataBlock), 1, ^uint64(0))
	if err != nil {
		return err
	}
	sb.MmpBlock = blk
	sb.MmpInterval = uint16(f.o.MMPUpdateInterval)
	if sb.MmpInterval == 0 {
		sb.MmpInterval = layout.MMPUpdateInterval
	}
	host, _ := os.Hostname()
	m := layout.NewMMP(sb.MmpInterval, uint64(f.o.Now.Unix()), host, mmpBdevname)
	m.SetChecksum(sb.MetadataCsum(), f.seed)
	b := make([]byte, f.p.bs)
	copy(b, m.Raw[:])
	return f.write(b, blk, 0)
}
