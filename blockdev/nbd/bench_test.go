package nbd_test

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/blockdevtest"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/blockdev/nbd"
)

const benchSize = 64 << 20

// BenchmarkRandom4K compares 4 KiB random reads and writes, one at a time,
// through nbd (nbdkit memory on a Unix socket) with memdev: the difference
// is the per-request overhead of the protocol, the socket and the server.
func BenchmarkRandom4K(b *testing.B) {
	b.Run("memdev", func(b *testing.B) { blockdevtest.BenchRandom4K(b, memdev.New(benchSize)) })
	b.Run("nbdkit-memory", func(b *testing.B) {
		s := startNbdkit(b, "memory", "64M")
		blockdevtest.BenchRandom4K(b, s.open(b, nbd.Options{}))
	})
	b.Run("qemu-nbd-raw", func(b *testing.B) {
		img := filepath.Join(b.TempDir(), "img")
		if err := os.WriteFile(img, nil, 0o644); err != nil {
			b.Fatal(err)
		}
		if err := os.Truncate(img, benchSize); err != nil {
			b.Fatal(err)
		}
		blockdevtest.BenchRandom4K(b, startQemuNbd(b, img).open(b, nbd.Options{}))
	})
}

// BenchmarkParallel4K is BenchmarkRandom4K with GOMAXPROCS*4 goroutines,
// so many requests are in flight on each connection.
func BenchmarkParallel4K(b *testing.B) {
	run := func(b *testing.B, d blockdev.Device) {
		defer d.Close()
		for _, op := range []string{"ReadAt", "WriteAt"} {
			b.Run(op, func(b *testing.B) {
				b.SetBytes(4096)
				b.SetParallelism(4)
				b.RunParallel(func(pb *testing.PB) {
					rng := rand.New(rand.NewPCG(rand.Uint64(), 1))
					buf := make([]byte, 4096)
					for pb.Next() {
						off := rng.Int64N(benchSize/4096) * 4096
						var err error
						if op == "ReadAt" {
							_, err = d.ReadAt(buf, off)
						} else {
							_, err = d.WriteAt(buf, off)
						}
						if err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		}
	}
	b.Run("memdev", func(b *testing.B) { run(b, memdev.New(benchSize)) })
	for _, conns := range []int{1, 4} {
		b.Run("nbdkit-memory-conns"+string(rune('0'+conns)), func(b *testing.B) {
			s := startNbdkit(b, "memory", "64M")
			run(b, s.open(b, nbd.Options{Conns: conns}))
		})
	}
}
