// Package bench is the engine behind "ext4io bench": its fixed set of
// workloads through ext4io's File API, each beside the raw device doing
// the same I/O pattern in the same run, and optionally beside Linux's
// ext4 (fio over a loop device, Config.Kernel). Run takes a Config and
// returns a Report, which writes itself as text (WriteText), as JSON
// (encoding/json, schema Schema) or as an SVG chart (WriteSVG).
// cmd/ext4io parses the flags and chooses the output; docs/bench.md
// describes both for users.
//
// # The device
//
// The backing device is a temporary image file by default (or
// Config.Image, or a memdev), split in two windows:
//
//	[0, size-region)      filesystem window: formatted by ext4io before
//	                      each workload (Format discards it first)
//	[size-region, size)   raw window: the raw side's pread/pwrite region
//
// region is a quarter of the device, at most 1 GiB, and also each
// workload's file size. Both windows are the same backend over the same
// file, so "raw" is the ceiling for any engine that does pread/pwrite on
// the image. Each window counts the device operations it passes on
// (window.go).
//
// By default raw does not use its window for workloads on a prepared
// file (written, fallocated, write-zeroes): it does its I/O at the device
// addresses of the engine's file, each offset through the file's extents,
// so both sides hit the same device blocks (write-zeroes blocks are
// zeroed again before each phase: see rezero). The host disk under an
// image is not equally fast everywhere, which Config.RawAtRegion (raw
// always in its window) counts against the engine. Fresh-file workloads
// use the raw window.
//
// When the temporary image is in tmpfs, every workload gets a new image
// file, and each Linux column a new backing file, loop device and
// filesystem, made and prepared before the previous one is removed, so
// that each workload's pages come from free memory (fresh.go).
//
// # Phases and rounds
//
// Each workload runs benchRounds phases per side, raw, engine, engine,
// raw (ABBA), the runtime split between them, so that load drifting on a
// shared machine hits both sides alike, and the same goroutine seeds give
// both the same offsets.
//
// Config.Repeat runs the workload list that many times, odd rounds in the
// listed order and even rounds reversed, so that a disk slowing down over
// the run does not favour the workloads that come first. The report gives
// each workload once: medians over the rounds, and ratios (engine/raw,
// between workloads, against Linux) as medians of ratios taken within one
// round. With Config.Kernel, each round ends with the fio pass in that
// round's order; with Config.FastCommit too, the workloads whose Linux
// path fast_commit changes run there twice, on ext4 at its defaults and
// on ext4 with fast_commit, each first in every other round.
//
// # Space
//
// Every workload keeps to the space plan (space.go), whatever its runtime
// and the disk's speed: the plan is checked, and written to Config.Log,
// before the first workload. A workload that fails anyway is reported in
// its row and the run goes on; Report.Err then names it.
//
// # Host figures
//
// Beside its own counts the report gives the process's CPU time and page
// faults per operation (getrusage on Unix) and, on Linux with the image
// on a block device, the I/O that device completed (hostdisk.go): whether
// a phase reached the disk or ran in the host's page cache.
package bench
