package layout

import "encoding/binary"

// Device numbers of character and block device inodes live in i_block,
// as ext4_do_update_inode writes them and ext4_iget reads them:
//
//	i_block[0] (0x28, le32)  old encoding (major<<8 | minor), when
//	                         major and minor are both below 256; else 0
//	i_block[1] (0x2C, le32)  new encoding when i_block[0] is 0:
//	                         minor&0xff | major<<8 | (minor&^0xff)<<12
//
// The rest of i_block is zero. Part of the on-disk format; must not change.

// PutDeviceNumber stores major:minor in a device inode's i_block, in the
// old encoding when it fits and the new one otherwise. The kernel keeps 12
// bits of major and 20 of minor; higher bits are dropped as it drops them.
func PutDeviceNumber(b *[InodeBlockSize]byte, major, minor uint32) {
	*b = [InodeBlockSize]byte{}
	major &= 0xfff
	minor &= 0xfffff
	le := binary.LittleEndian
	if major < 256 && minor < 256 {
		le.PutUint32(b[0:], major<<8|minor)
		return
	}
	le.PutUint32(b[4:], minor&0xff|major<<8|(minor&^0xff)<<12)
}

// DeviceNumber returns the major:minor a device inode's i_block holds.
func DeviceNumber(b *[InodeBlockSize]byte) (major, minor uint32) {
	le := binary.LittleEndian
	if old := le.Uint32(b[0:]); old != 0 {
		return old >> 8 & 0xff, old & 0xff
	}
	n := le.Uint32(b[4:])
	return n & 0xfff00 >> 8, n&0xff | n>>12&0xfff00
}
