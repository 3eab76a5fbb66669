//go:build freebsd || openbsd

package ext4io

import "syscall"

// errnoNoAttr is the errno ErrNoAttr matches: ENOATTR, which these systems
// return for a missing attribute (they have no ENODATA).
const errnoNoAttr = syscall.ENOATTR
