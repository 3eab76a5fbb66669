module github.com/ext4io/ext4io

go 1.26.0

require (
	github.com/cespare/xxhash/v2 v2.3.0
	github.com/google/btree v1.1.3
	github.com/stretchr/testify v1.12.1
	golang.org/x/sys v0.50.0
)

require go.yaml.in/yaml/v3 v3.0.5 // indirect

require github.com/hanwen/go-fuse/v2 v2.12.1
