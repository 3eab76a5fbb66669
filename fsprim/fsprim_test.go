package fsprim_test

import (
	"bytes"
	"testing"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/esc"
	"github.com/ext4io/ext4io/ext4iotest"
	"github.com/ext4io/ext4io/extent"
	"github.com/ext4io/ext4io/fsprim"
	"github.com/ext4io/ext4io/layout"
	"github.com/stretchr/testify/require"
)

func newFS(t *testing.T) (*memdev.Device, *layout.Superblock) {
	dev := memdev.New(32 << 20)
	require.NoError(t, ext4io.Format(dev, ext4io.FormatOptions{}))
	sb, err := fsprim.ReadSuperblock(dev)
	require.NoError(t, err)
	return dev, sb
}

// TestLookupHoles checks that Lookup's holes fit esc: an empty tree is one
// hole to EXT_MAX_BLOCKS, cached whole by Fill, and a hole before an
// extent ends at it.
func TestLookupHoles(t *testing.T) {
	dev, sb := newFS(t)
	fs, err := fsprim.Open(dev, sb, fsprim.NewDirectIO(dev, sb.BlockSize()))
	require.NoError(t, err)
	ino, in, err := fs.NewInode(layout.RootIno, 0o644)
	require.NoError(t, err)
	ta := &fsprim.TreeAlloc{A: fs.Alloc, Ino: ino}
	root := in.Block
	tr, err := extent.Open(&root, fs.TreeConfig(ino, in, ta))
	require.NoError(t, err)
	es := esc.New(esc.Options{}).Inode(ino)
	e, err := es.Fill(5, fsprim.Lookup(tr))
	require.NoError(t, err)
	require.Equal(t, esc.Extent{Lblk: 5, Len: esc.MaxBlocks - 5, Status: esc.Hole}, e)
	_, _, err = fsprim.Lookup(tr)(esc.MaxBlocks)
	require.ErrorIs(t, err, fsprim.ErrInvalid)

	start, n, err := fs.Alloc.AllocFor(ino, 0, 4, 4)
	require.NoError(t, err)
	require.NoError(t, tr.Insert(extent.Extent{Lblk: 100, Len: uint32(n), Pblk: start}))
	x, inRoot, err := fsprim.Lookup(tr)(10)
	require.NoError(t, err)
	require.True(t, inRoot)
	require.Equal(t, esc.Extent{Lblk: 10, Len: 90, Status: esc.Hole}, x)
	x, _, err = fsprim.Lookup(tr)(101)
	require.NoError(t, err)
	require.Equal(t, esc.Extent{Lblk: 100, Len: 4, Pblk: start, Status: esc.Written}, x)
	require.Zero(t, ta.Blocks.Load(), "no tree block for 1 extent")
}

// TestJournalIOReadsNewest checks that a block changed in a handle reads
// back changed through JournalIO before and after the commit, while the
// device keeps the old copy until the checkpoint; then that a file made
// with NewInode, WriteInode and Link through the journal passes e2fsck.
func TestJournalIOReadsNewest(t *testing.T) {
	dev, sb := newFS(t)
	j, err := fsprim.OpenJournal(dev, sb)
	require.NoError(t, err)
	sb.FeatureIncompat |= layout.IncompatRecover
	_, err = dev.WriteAt(sb.Encode(), layout.SuperblockOffset)
	require.NoError(t, err)
	jio := &fsprim.JournalIO{J: j, Dev: dev, BS: sb.BlockSize()}
	fs, err := fsprim.Open(dev, sb, jio)
	require.NoError(t, err)

	_, err = jio.GetWrite(1000)
	require.ErrorIs(t, err, fsprim.ErrInvalid, "outside Begin/End")
	require.NoError(t, jio.Begin(16))
	ino, in, err := fs.NewInode(layout.RootIno, 0o600)
	require.NoError(t, err)
	require.NoError(t, fs.WriteInode(ino, in))
	require.NoError(t, fs.Link(layout.RootIno, "made-by-fsprim", ino, layout.FtRegFile))
	require.ErrorIs(t, fs.Link(layout.RootIno, "made-by-fsprim", ino, layout.FtRegFile), fsprim.ErrExist)
	require.NoError(t, jio.End())

	got, err := fs.ReadInode(ino)
	require.NoError(t, err, "the newest copy, from the running transaction")
	require.Equal(t, in.Mode, got.Mode)
	raw := fsprim.NewDirectIO(dev, sb.BlockSize())
	onDisk, err := fsprim.Open(dev, sb, raw)
	require.NoError(t, err)
	old, err := onDisk.ReadInode(ino)
	require.NoError(t, err)
	require.NotEqual(t, in.Mode, old.Mode, "the device holds the old copy before the checkpoint")

	require.NoError(t, j.Commit())
	got, err = fs.ReadInode(ino)
	require.NoError(t, err, "the newest copy, committed, not checkpointed")
	require.Equal(t, in.Mode, got.Mode)

	require.NoError(t, j.Close())
	sb.FeatureIncompat &^= layout.IncompatRecover
	require.NoError(t, fs.WriteSuperblock())
	out := ext4iotest.FsckDev(t, dev)
	require.False(t, bytes.Contains([]byte(out), []byte("Fix")), out)
	require.Contains(t, ext4iotest.Debugfs(t, ext4iotest.ImageOf(t, dev), false, "ls -l /"), "made-by-fsprim")
}
