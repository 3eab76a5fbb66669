package ext4io

import (
	"io/fs"

	"github.com/ext4io/ext4io/layout"
)

// Special files: fifos, sockets, character and block devices. They map no
// blocks and have no extents flag (as ext4_new_inode leaves them); a
// device's number sits in i_block (layout.PutDeviceNumber).

// isSpecial reports an inode of a device, fifo or socket.
func isSpecial(in *layout.Inode) bool {
	switch in.Mode & layout.ModeFmt {
	case layout.ModeChr, layout.ModeBlk, layout.ModeFIFO, layout.ModeSock:
		return true
	}
	return false
}

// Mkdev returns the device number of major:minor in the encoding of
// Linux's dev_t (as golang.org/x/sys/unix.Mkdev), which Mknod takes and
// FileInfo.Rdev reports.
func Mkdev(major, minor uint32) uint64 {
	m, n := uint64(major), uint64(minor)
	return m&0xfff<<8 | m&^0xfff<<32 | n&0xff | n&^0xff<<12
}

// devMajor and devMinor split a Mkdev number.
func devMajor(dev uint64) uint32 { return uint32(dev>>8&0xfff | dev>>32&^0xfff) }
func devMinor(dev uint64) uint32 { return uint32(dev&0xff | dev>>12&^0xff) }

// inodeRdev returns a device inode's number as Mkdev encodes it (0 for
// other inodes).
func inodeRdev(in *layout.Inode) uint64 {
	if f := in.Mode & layout.ModeFmt; f != layout.ModeChr && f != layout.ModeBlk {
		return 0
	}
	return Mkdev(layout.DeviceNumber(&in.Block))
}

// Mknod makes a special file at name, as mknod(2) (unix.Mknod) does. The
// type comes from mode: fs.ModeNamedPipe (a fifo), fs.ModeSocket,
// fs.ModeDevice|fs.ModeCharDevice (a character device), fs.ModeDevice (a
// block device), or none (an empty regular file); the permission bits
// (with setuid, setgid, sticky) are kept as given. dev is the device
// number of a device, as Mkdev encodes it, and is ignored otherwise.
// Linux's 12-bit major and 20-bit minor limits apply.
//
// Opening a special file gives a File that reads as empty and refuses
// writes: ext4io has no devices, pipes or sockets behind them.
func (v *Volume) Mknod(name string, mode fs.FileMode, dev uint64) error {
	if err := v.op(func() error { return v.mknod(name, mode, dev) }); err != nil {
		return &fs.PathError{Op: "mknod", Path: name, Err: err}
	}
	return nil
}

func (v *Volume) mknod(name string, mode fs.FileMode, dev uint64) error {
	v.fcIneligible("device node or fifo") // fast commits cannot express it (fcwrite.go)
	var ft uint16
	switch mode.Type() {
	case 0:
		_, err := v.create(name, layout.ModeReg|unixMode(mode))
		return err
	case fs.ModeNamedPipe:
		ft = layout.ModeFIFO
	case fs.ModeSocket:
		ft = layout.ModeSock
	case fs.ModeDevice | fs.ModeCharDevice:
		ft = layout.ModeChr
	case fs.ModeDevice:
		ft = layout.ModeBlk
	case fs.ModeDir:
		return ErrPermission // mknod(2): EPERM for a directory
	default:
		return ErrInvalid
	}
	if err := v.writableNS(); err != nil {
		return err
	}
	dir, base, err := v.parentDir(name, opCreate)
	if err != nil {
		return err
	}
	dir.n.mu.Lock()
	defer dir.n.mu.Unlock()
	if _, err := dir.lookupName(base); err == nil {
		return ErrExist
	} else if !isNotExist(err) {
		return err
	}
	if err := notDirName(name); err != nil {
		return err
	}
	ino, err := v.allocInode(dir.ino, false)
	if err != nil {
		return err
	}
	in := v.newInode(ft | unixMode(mode))
	inheritGroup(dir, in)
	in.Flags &^= layout.InodeFlagExtents
	in.Block = [layout.InodeBlockSize]byte{}
	if ft == layout.ModeChr || ft == layout.ModeBlk {
		layout.PutDeviceNumber(&in.Block, devMajor(dev), devMinor(dev))
	}
	if err := v.writeNewInode(ino, in); err != nil {
		v.alloc.FreeInode(ino, false)
		return err
	}
	if err := dir.addEntryLocked(base, ino, v.entryType(ft)); err != nil {
		v.discardInode(ino, in, false)
		return err
	}
	dir.touchLocked()
	return v.writeInodeLocked(dir.n)
}
