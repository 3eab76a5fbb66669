package ext4io

import "errors"

// ErrBusy: the filesystem is in use elsewhere, so it cannot be opened for
// writing: its multiple mount protection block shows another node (or
// e2fsck) using it. The message names the node and device the block
// records.
//
// Defined here for the mmp branch; errors.go gains the same sentinel for
// one-writer locking, and the two are one at merge.
var ErrBusy = errors.New("ext4: device or resource busy")
