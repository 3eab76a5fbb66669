package main

import (
	"fmt"

	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/esc"
	"github.com/ext4io/ext4io/fsprim"
	"github.com/ext4io/ext4io/iomap"
	"github.com/ext4io/ext4io/journal"
	"github.com/ext4io/ext4io/layout"
)

// Store keeps blobs as files in the root directory of an ext4 image,
// built on the lower packages alone. It is thread-compatible.
type Store struct {
	dev   blockdev.Device
	fs    *fsprim.FS
	j     *journal.Journal
	jio   *fsprim.JournalIO
	cache *esc.Cache
}

// Open opens the ext4 file system on dev, replaying its journal.
func Open(dev blockdev.Device) (*Store, error) {
	sb, err := fsprim.ReadSuperblock(dev)
	if err != nil {
		return nil, err
	}
	j, err := fsprim.OpenJournal(dev, sb)
	if err != nil {
		return nil, err
	}
	// needs_recovery while the journal may hold transactions.
	sb.FeatureIncompat |= layout.IncompatRecover
	if _, err := dev.WriteAt(sb.Encode(), layout.SuperblockOffset); err != nil {
		return nil, err
	}
	jio := &fsprim.JournalIO{J: j, Dev: dev, BS: sb.BlockSize()}
	fs, err := fsprim.Open(dev, sb, jio)
	if err != nil {
		return nil, err
	}
	return &Store{dev: dev, fs: fs, j: j, jio: jio, cache: esc.New(esc.Options{})}, nil
}

// Put writes data as a new file name in the root directory, in one
// journal transaction, data first. It returns the file's inode.
func (s *Store) Put(name string, data []byte) (ino uint32, err error) {
	if err := s.jio.Begin(64); err != nil {
		return 0, err
	}
	defer func() {
		if eerr := s.jio.End(); err == nil {
			err = eerr
		}
		if err == nil {
			err = s.j.Commit()
		}
	}()
	ino, in, err := s.fs.NewInode(layout.RootIno, 0o644)
	if err != nil {
		return 0, err
	}
	ops, err := s.ops(ino, in)
	if err != nil {
		return 0, err
	}
	bs := s.fs.BS
	buf := make([]byte, (len(data)+bs-1)/bs*bs) // direct I/O: whole blocks
	copy(buf, data)
	if _, err := iomap.DirectWrite(s.dev, ops, buf, 0, &iomap.DioOptions{BlockSize: int64(bs)}); err != nil {
		return 0, err
	}
	in.Size, in.Block = uint64(len(data)), ops.tree.Root()
	in.SetBlocks(s.fs.SB, uint64(int64(len(buf)/bs)+ops.ta.Blocks.Load())*uint64(bs/512))
	if err := s.fs.WriteInode(ino, in); err != nil {
		return 0, err
	}
	return ino, s.fs.Link(layout.RootIno, name, ino, layout.FtRegFile)
}

// Get reads the blob in inode ino.
func (s *Store) Get(ino uint32) ([]byte, error) {
	in, err := s.fs.ReadInode(ino)
	if err != nil {
		return nil, err
	}
	ops, err := s.ops(ino, in)
	if err != nil {
		return nil, err
	}
	bs := uint64(s.fs.BS)
	buf := make([]byte, (in.Size+bs-1)/bs*bs)
	if _, err := iomap.DirectRead(s.dev, ops, buf, 0, nil); err != nil {
		return nil, err
	}
	return buf[:in.Size], nil
}

// Close commits, checkpoints and empties the journal, then marks the file
// system clean with the new free counts.
func (s *Store) Close() error {
	if err := s.j.Close(); err != nil {
		return fmt.Errorf("blobstore: closing the journal: %w", err)
	}
	s.fs.SB.FeatureIncompat &^= layout.IncompatRecover
	return s.fs.WriteSuperblock()
}
