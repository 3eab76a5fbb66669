package layout

import "encoding/binary"

// Inline data (incompat feature inline_data, EXT4_INLINE_DATA_FL). An
// inline inode keeps its data in the inode: the first 60 bytes in i_block,
// the rest in the value of the in-inode attribute system.data
// (XattrIndexSystem, name "data"), which exists, possibly empty, on every
// inline inode. The size is i_size; at most 60 + the room of the inode
// body's attributes (ext4_get_max_inline_size).
//
// An inline directory (struct ext4_dir_entry_2 records, as in a directory
// block, but no "." and ".." and no checksum tail):
//
//	i_block  0x00 parent inode number (le32), for ".."
//	         0x04 entries up to 0x3C, the last one's rec_len reaching 0x3C
//	system.data  entries, the last one's rec_len reaching the value's end
//
// Converting an inode to extents removes system.data
// (ext4_destroy_inline_data).

const (
	// InlineDirParentLen is the size of an inline directory's parent
	// pointer (EXT4_INLINE_DOTDOT_SIZE); part of the on-disk format.
	InlineDirParentLen = 4
	// XattrInlineDataName is the name, under XattrIndexSystem, of the
	// attribute holding inline data past i_block (EXT4_XATTR_SYSTEM_DATA);
	// part of the on-disk format.
	XattrInlineDataName = "data"
)

// InlineDirParent returns the parent inode number of the inline directory
// whose data (i_block first) is b.
func InlineDirParent(b []byte) uint32 { return binary.LittleEndian.Uint32(b) }

// SetInlineDirParent stores the parent inode number of an inline directory
// into its data b.
func SetInlineDirParent(b []byte, ino uint32) { binary.LittleEndian.PutUint32(b, ino) }
