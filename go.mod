module github.com/ext4io/ext4io

go 1.26.0

require (
	github.com/google/btree v1.1.3
	golang.org/x/sys v0.50.0
)

require github.com/hanwen/go-fuse/v2 v2.12.1
