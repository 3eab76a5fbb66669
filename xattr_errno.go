//go:build !freebsd && !openbsd

package ext4io

import "syscall"

// errnoNoAttr is the errno ErrNoAttr matches: Linux's ENODATA.
const errnoNoAttr = syscall.ENODATA
