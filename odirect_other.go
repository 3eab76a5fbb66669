//go:build !linux

package ext4io

// O_DIRECT asks Volume.OpenFile for direct I/O: a bit no os.O_* flag uses.
const O_DIRECT = 1 << 30
