package ext4io

import "syscall"

// O_DIRECT asks Volume.OpenFile for direct I/O. On Linux it is
// syscall.O_DIRECT, so flags built for os.OpenFile carry over.
const O_DIRECT = syscall.O_DIRECT
