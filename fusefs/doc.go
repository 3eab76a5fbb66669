// Package fusefs serves an ext4io Volume as a FUSE file system, so that
// Linux programs use an ext4 image through ext4io as they would a mounted
// ext4 file system. It is the only package of ext4io that imports a FUSE
// library (github.com/hanwen/go-fuse/v2, its fs.Inode API).
//
// # Mapping
//
// FUSE node IDs are go-fuse's; the inode numbers the kernel reports
// (st_ino) are ext4's, and the generation is i_generation. Errors map to
// the errnos Linux's ext4 returns.
//
// ext4io's namespace API takes paths, FUSE's takes inodes. Operations on
// an open file (read, write, fsync, fallocate, lseek, ftruncate) use its
// File. Getattr, truncate without a handle and the xattr operations use a
// File opened by inode number (Volume.OpenIno) and need no path. The others
// (lookup, open, create, mkdir, mknod, symlink, link, unlink, rmdir,
// rename, readdir, readlink, chmod, chown, utimes) build the path from
// go-fuse's tree of known inodes. Open goes by path because ext4io counts
// only Files opened by path as open: an unlinked file stays readable while
// such a File is open.
//
// # Concurrency
//
// go-fuse serves requests concurrently and this layer adds no global lock
// on the data path: reads, writes and the per-inode operations run in
// parallel, and ext4io's own locks order them. One exception keeps paths
// correct: a path built from the tree is only meaningful while no
// directory above it is being renamed, so operations that use a path hold
// the Server's rename lock shared, and a rename of a directory holds it
// exclusively (the role of Linux's s_vfs_rename_mutex). The kernel already
// serializes operations on the same directory entries (i_rwsem of the
// parents), so names themselves cannot change under a path operation.
//
// # Permissions
//
// Mount adds default_permissions: the kernel checks permissions against
// the mode, owner and group this layer reports, as it does for ext4. POSIX
// ACLs are stored as xattrs but not enforced by the kernel.
//
// # Options
//
// ParseOptions reads mount options in the -o syntax of mount, fuse2fs and
// ext4io mount into the Options for Mount.
//
// The package builds on Linux only (its FUSE server uses Linux-only flags
// and errors); elsewhere it is empty.
package fusefs
