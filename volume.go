package ext4io

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/ext4io/ext4io/alloc"
	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/nbd"
	"github.com/ext4io/ext4io/esc"
	"github.com/ext4io/ext4io/internal/errs"
	"github.com/ext4io/ext4io/internal/stripe"
	"github.com/ext4io/ext4io/internal/wallclock"
	"github.com/ext4io/ext4io/iomap"
	"github.com/ext4io/ext4io/layout"
)

// Options configure Open.
type Options struct {
	// Writable opens the volume read-write. Open updates the
	// superblock's mount count and its mount and write times, as Linux
	// does on mount, and marks its state not clean, with or without a
	// journal; with a journal it also sets needs_recovery, as Linux does.
	// (Linux leaves a journaled filesystem's state clean and counts on
	// needs_recovery alone; it marks the state not clean only without a
	// journal.) Close marks the state clean and clears needs_recovery; a
	// volume not closed (a crash) leaves both, so the next Open replays
	// the journal and e2fsck checks the whole filesystem. The device must
	// be writable. Features ext4io cannot keep consistent when writing
	// (unknown ro_compat or incompat bits, ea_inode, ...) make Open
	// fail with ErrUnsupported naming them. With the mmp feature Open
	// first runs multiple mount protection, as Linux does: it waits at least
	// 11 s and fails with ErrBusy while another node, Linux or e2fsck
	// uses the filesystem.
	Writable bool
	// NoRecovery opens a read-only volume whose journal needs recovery
	// without replaying it (like mount -o norecovery): reads may see stale
	// metadata. Without it Open replays the journal: into the device for
	// writable volumes, into an in-memory overlay (the image untouched) for
	// read-only ones. Volume.Recovery reports what was replayed.
	NoRecovery bool
	// Replay replays a journal that needs recovery into the device even
	// for a read-only open (like e2fsck -E journal_only) and marks the
	// superblock clean, as Close of a writable volume does, unless
	// the replay found a failed commit; the device must be writable.
	Replay bool
	// CacheBudget bounds the extent-status cache's memory in bytes across
	// all inodes (0: 64 MiB).
	CacheBudget int64
	// InodeCache bounds the number of inodes the volume keeps in memory
	// (0: 16384; negative: no bound, every inode read stays until Close).
	// It is a soft bound: inodes in use (open Files, operations in
	// flight), those with pages in the page cache and those with changes
	// not yet written (times, sizes or blocks of buffered writes,
	// fast-commit tracking, orphans) stay however many they are; past the
	// bound others not looked up lately are dropped and read again from
	// the image on their next use.
	InodeCache int
	// SkipChecksums disables metadata checksum verification on read (for
	// salvaging data from damaged images). Structural checks stay on.
	SkipChecksums bool
	// MetaCacheBytes bounds the metadata buffer cache of a writable
	// volume (0: 16 MiB; negative: none, every metadata read goes to the
	// journal's copy or the device). The cache keeps the clean copies of
	// bitmaps, group descriptors, inode table, directory, extent tree and
	// xattr blocks, so that each is read once and not copied per access;
	// blocks changed by the running or committing transaction are held
	// apart from it until logged, whatever the budget.
	//
	// It also bounds the copies of committed metadata blocks the journal
	// keeps until a checkpoint writes them home: past twice the budget,
	// at least 32 MiB, the background checkpoint starts, and past twice
	// that a new change waits for a checkpoint. Without it memory would
	// grow with the log (up to half of it: 512 MiB with the 1 GiB log
	// mkfs.ext4 gives filesystems of 128 GiB or more); logs of up to 64
	// MiB, the default below 16 GiB, fill half before reaching it. The
	// journal's copies become the cache's once logged, so the two
	// overlap.
	MetaCacheBytes int64
	// PageCacheBytes bounds the page cache of a writable volume, which
	// holds the pages of buffered writes until write-back (0: 64 MiB;
	// negative: no page cache, every write goes to the device at once, as
	// with O_DIRECT but without the alignment rule).
	PageCacheBytes int64
	// WritebackAge is how long buffered data may stay dirty before the
	// background flusher writes it back (0: 5 s; negative: no flusher,
	// write-back only on Sync, Close and memory pressure; under 1 ms: 1 ms,
	// the flusher's shortest tick).
	WritebackAge time.Duration
	// CommitInterval is how long metadata changes of a journaled volume
	// may wait in memory before a background commit makes them durable
	// (0: 5 s, jbd2's default commit interval; negative: commits only on
	// Sync, Close and when an operation leaves many blocks pending). Each
	// tick writes deferred inode updates and commits the journal if
	// anything is pending, as Linux's jbd2 thread does every commit=N
	// seconds. A positive interval under 1 ms is taken as 1 ms.
	CommitInterval time.Duration
	// Discard tells the device about blocks the volume frees (Linux's
	// mount -o discard), for thin-provisioned and network storage: each
	// run freed by truncate, punch, unlink or an extent tree change is
	// passed to the device's Discard once the journal transaction freeing
	// it has committed (never before: a crash must find the blocks the
	// committed metadata maps intact), and stays unallocatable until its
	// discard returned, so no new data is written there first. Without a
	// journal the run is discarded as it is freed. A failed or
	// unsupported discard is not an error of the operation: it is counted
	// (DiscardStats), and ErrUnsupported turns online discard off. Trim
	// discards free space on demand instead (fstrim).
	Discard bool
	// Tuning holds the write engine's switches for direct writes into
	// preallocated space and its reserved pool, for engine builders and
	// benchmarks; the zero value is the default.
	Tuning Tuning
}

// Tuning holds switches of the write engine: how direct writes into
// preallocated (unwritten) space split and convert extents, and the
// reserved pool those splits draw on. They are for engine builders and
// benchmarks that compare strategies (cmd/ext4io bench's --defer-splits,
// --eager-conversions and --zeroout-chunk set them, and tests that reach
// the rare paths); the zero value is the engine's default, right for
// everyone else.
type Tuning struct {
	// NoJournal writes metadata in place, without the journal, as
	// mke2fs -d and e2fsprogs' tools do: changed metadata blocks collect
	// in the metadata cache and are written home in sorted runs when they
	// fill half of it (MetaCacheBytes) and before every device flush
	// (Sync, Close). Nothing is crash-consistent until Close has flushed
	// and marked the filesystem clean: a crash before leaves an image
	// for e2fsck or for deleting. For building images (ext4io mkfs -d),
	// not for volumes that must survive a crash. A journal the
	// filesystem has is left as it is (it must not need recovery).
	NoJournal bool
	// ReservedPool is the number of blocks only allocations that must not
	// fail for space may take: tree blocks for the extent splits of writes
	// into preallocated (unwritten) space and for delayed-allocation
	// write-back (ext4's reserved clusters; 0: min(2% of the blocks,
	// 4096); negative: none).
	ReservedPool int64
	// DeferSplits postpones the extent split a direct write into
	// preallocated (unwritten) space needs until its I/O completes: one
	// metadata update per write instead of two. By default the unwritten
	// extent is split when the write is submitted (ext4's
	// EXT4_GET_BLOCKS_PRE_IO), so each in-flight write owns its own
	// extent and conversion at completion needs no tree block.
	//
	// ENOSPC: either way a split takes its tree block from free space,
	// then from the reserved pool. By default, when both are exhausted,
	// the write fails with ErrNoSpace before any of its data is written.
	// With DeferSplits the split happens after the data reached the
	// device: when both are exhausted then, the write fails with
	// ErrNoSpace, the bytes it reports stop before the range that could
	// not be converted, and that range keeps reading as zeroes. Counters
	// SplitsDeferred counts the conversions left to completion.
	DeferSplits bool
	// NoFastCommit makes File.Sync and Datasync commit the journal even
	// on a filesystem with the fast_commit feature (fcwrite.go), as
	// Linux's mount option no_fc does... the feature stays set.
	NoFastCommit bool
	// FastCommitOneFlush makes a fast commit that maps new blocks flush
	// the device once, after its data and its fast-commit block, instead
	// of before and after the block (ext4's REQ_PREFLUSH|REQ_FUA, the FUA
	// emulated by a flush). It saves a flush per fsync but opens a window,
	// as jbd2's async_commit does: a crash before the flush may leave the
	// new mapping durable without its data, exposing the blocks' old
	// contents.
	FastCommitOneFlush bool
	// AtomicJournalMax is the largest File.WriteAtomic or
	// WriteAtomicBatch, in bytes, that is written through the journal and
	// then in place, keeping the file's blocks (atomicjournal.go), rather
	// than to new blocks swapped in: such a write over blocks already
	// written inside the on-disk size, on a file synced since its last
	// atomic write, is durable when it returns. 0 means 64 KiB; negative,
	// never. Writes larger than a sixteenth of the journal are never
	// journalled.
	AtomicJournalMax int64
	// ZeroOutChunk, when set, makes direct writes into preallocated
	// (unwritten) blocks inside the on-disk size convert whole chunks:
	// the first write into a ZeroOutChunk-aligned chunk writes zeroes to
	// the chunk's unwritten blocks and converts them to written in one
	// metadata update, then writes its data as an overwrite, and every
	// later write into the chunk is a plain overwrite. Zeroing instead of
	// converting gives fewer metadata updates and far fewer extents (each write into preallocated space otherwise
	// splits an extent into up to three) for extra zero writes, at most
	// one chunk's worth per chunk. The zeroes are written with ordinary
	// writes, not the device's ZeroOut: on a file-backed image ZeroOut
	// leaves the blocks unwritten in the host file system, whose own
	// conversion the later overwrites would pay. A chunk stops at the
	// on-disk size; chunks with dirty cached pages are left alone (then
	// only the write's own blocks are zeroed and converted). It must be a
	// multiple of the block size, at most 32 MiB; 0 (the default)
	// converts exactly the blocks each write covers, as Linux's direct
	// I/O does. Writes past the on-disk size are not affected.
	ZeroOutChunk int64
	// EagerConversions makes a direct write into preallocated (unwritten)
	// space under the shared inode lock change the extent tree itself:
	// split at submission, convert at completion, both under the inode's
	// data lock, as Linux does. By default the completion only queues the
	// conversion, and the tree takes queued conversions in batches, at
	// the latest with the next journal commit. Either way a
	// write's conversion is durable after Sync, and reads see the data as
	// soon as the write returns. DeferSplits and ZeroOutChunk imply it,
	// as do volumes without a journal.
	EagerConversions bool
	// ExtentCacheSkipInRoot keeps the extent-status cache from caching
	// the mappings of files whose whole extent tree sits in the inode
	// (esc.Options.SkipInRoot): a miss there is found again in i_block
	// without a block read, so small files cost no cache memory, at the
	// price of a tree lookup on each miss. By default every answer is
	// cached.
	ExtentCacheSkipInRoot bool
}

// maxZeroOutChunk bounds Tuning.ZeroOutChunk.
const maxZeroOutChunk = 32 << 20

// Volume is an ext4 filesystem on a block device, opened read-only or
// (Options.Writable) read-write.
//
// A Volume is safe for concurrent use by multiple goroutines. After Close
// every method that returns an error returns one matching ErrClosed (and
// fs.ErrClosed); the zero Volume is not open, and its methods return
// ErrInvalid instead of panicking.
type Volume struct {
	dev      blockdev.Device
	closeDev bool // Close closes dev (the volume opened it)
	// release gives up the writer's claim on dev (blockdev.Claim) of a
	// volume opened Writable or with Replay; nil otherwise.
	release func()
	opts    Options

	// Immutable after Open.
	sb       *layout.Superblock
	bs       int
	bshift   uint // log2(bs), for the per-I/O block arithmetic
	groups   []*layout.GroupDesc
	csumSeed uint32
	csum     bool        // metadata_csum
	zone     *systemZone // blocks no file may map (zone.go); rebuilt only during Open
	cache    *escSet     // extent-status cache, safe for concurrent use
	zchunk   uint64      // Tuning.ZeroOutChunk in blocks (set before writes start)
	lbs      int64       // dev's logical block size
	align    int64       // dev's direct I/O alignment (dioAlign)
	// owOpts are the options of the overwrite attempt of direct writes
	// (directOverwrite), set with align and read-only after.
	owOpts iomap.DioOptions

	alloc    *alloc.Allocator // writable volumes only; safe for concurrent use
	pc       *iomap.PageCache // buffered writes of a writable volume; nil if disabled
	meta     alloc.MetaIO     // metadata block I/O of a writable volume
	mcache   *metaCache       // metadata buffer cache of a writable volume (mdcache.go); nil if disabled
	blkLocks blockLocks
	xcache   xattrCache // xattr blocks by hash, for sharing (xattr.go)

	recovered *RecoveryInfo // what Open replayed, nil if nothing

	// mmp holds the MMP block of a volume opened for writing with the mmp
	// feature (mmp.go); nil otherwise. Set in Open.
	mmp *mmpHolder

	// orphanPresent is the orphan_present ro_compat flag of a writable
	// volume, applied when the superblock is encoded.
	orphanPresent atomic.Bool
	orphanMu      sync.Mutex // serializes changes to the orphan file's slots

	inoMu  sync.Mutex
	inodes map[uint32]*inode // guarded by inoMu
	// inoWeak holds the demoted inodes (inocache.go), guarded by inoMu,
	// and is swept of collected ones when it grows past inoSweepAt;
	// inoBudget is Options.InodeCache resolved; inoShrink is held by the
	// one shrinkInodes running.
	inoWeak    map[uint32]weak.Pointer[inode]
	inoSweepAt int
	// inoShrinkAt: no shrinkInodes pass before v.inodes holds this many
	// (a backoff after a pass that demoted none); guarded by inoMu.
	inoShrinkAt int
	inoBudget   int
	// inoBatch is the most demotions of one shrinkInodes pass; inoHigh the
	// cache size past which a read starts a pass (inoBudget + inoBatch/2).
	inoBatch, inoHigh int
	// inoTries counts demotion attempts (shrinkInodes), for tests.
	inoTries  atomic.Uint64
	inoShrink sync.Mutex
	// inoForgets counts forgetInode calls by inode number modulo its
	// length (guarded by inoMu): getInode inserts an inode it read only
	// if no forget of a number of its stripe ran during the read.
	inoForgets [64]uint64

	nss nsState // open Files and in-memory orphans (orphan.go)

	// sbMu guards sb's mutable fields (state, counters, times) and
	// serializes superblock writes.
	sbMu sync.Mutex
	// unmounted is set by Close once the journal is checkpointed: the
	// superblock is written without needs_recovery. sb's feature fields
	// stay as they are, as operations still in flight read them without
	// a lock. Guarded by sbMu.
	unmounted bool
	// internalStopped is set by Close, on a volume without a journal,
	// once its own internal operations ran: later ones fail with
	// ErrClosed (beginInternalOp), as jmeta.stopped makes them on a
	// journaled volume. Guarded by txnGate as jmeta.stopped is.
	internalStopped bool

	jm *jmeta // journaled metadata of a writable volume with a journal, else nil
	// home is the background in-place writes of journalled atomic writes
	// (homewrite.go) of a writable volume; zero otherwise.
	home volumeHome
	// stepHook, when set (tests only), runs after each operation of a
	// stepped removal (File.removeSteps), outside it; done after the last.
	stepHook func(done bool)
	// inodeReadHook, when set (tests only), runs in getInode between
	// reading an inode and caching it; openHook in OpenFile, CreateAt and
	// FS.Open between finding the File and trackOpen.
	inodeReadHook func(ino uint32)
	openHook      func(f *File)
	// fc tracks the changes fast commits log (fcwrite.go); nil unless the
	// volume is writable, journaled and has fast_commit. Set in Open.
	fc *fcState

	// touch stamps the times of shared-lock direct writes (touchclock.go).
	touch touchClock

	// txnGate is held shared by each metadata-changing operation and
	// exclusively by a journal commit (see jmeta) and by Close, which
	// waits out the operations in flight (with or without a journal).
	// Striped: every direct write takes it, on the stripe of its buffer.
	txnGate stripe.RWMutex

	stats struct {
		metaUpdates, exclusive, conversions, zeroOuts, handles atomic.Uint64
		inodeEvictions                                         atomic.Uint64
		shared                                                 stripe.Counter // per direct write: striped by buffer
		// sharedNotOverwrite counts the shared-lock writes that converted
		// or went on under the exclusive lock; the rest are overwrites.
		// Counting the rare case keeps one atomic off the overwrite path.
		sharedNotOverwrite                 atomic.Uint64
		buffered, delalloc, splitsDeferred atomic.Uint64
		// convQueued counts queued conversions, which conversions does
		// not: Counters.Conversions is their sum (one atomic per write).
		convQueued, convBatches atomic.Uint64
		atomicJournalled        atomic.Uint64
	}

	// queueConv: shared-lock direct writes into unwritten blocks queue
	// their conversions (conv.go). Set at Open.
	queueConv bool
	// convInodes holds the inodes that may have queued conversions, for
	// the commit to apply. Guarded by convMu, a leaf lock (taken with at
	// most an inode's dataMu held).
	convMu     sync.Mutex
	convInodes map[*inode]struct{}
	// convResv is the space reserved for queued conversions (convresv.go).
	convResv convResv

	disc discardState // Options.Discard and Trim (discard.go)
	// trimMu is held shared by each Trim and taken once by Close after
	// it set closed, so that Close waits out the Trims in flight, which
	// stop at their next discard once closed is set.
	trimMu sync.RWMutex

	closed atomic.Bool
}

// Open opens the ext4 filesystem on dev. It validates the superblock and
// every group descriptor and refuses incompat features ext4io cannot read,
// naming them (ErrUnsupported). The caller keeps ownership of dev.
//
// One writer per image: a writable open (or one with Replay) first claims
// dev with blockdev.Claim, before it writes anything, and holds the claim
// until Close. It fails at once with an error wrapping ErrBusy when
// another writable Volume of this process holds dev (or, for the OS
// backends, the same file, also under a wrapper with an Unwrap method as
// blockdev.Claim describes), when another process holds the image (flock;
// O_EXCL for block devices) or when Linux has it mounted (the message
// names the mount point). Read-only opens take no claim and work beside
// a writer.
func Open(dev blockdev.Device, opts Options) (*Volume, error) {
	return OpenContext(context.Background(), dev, opts)
}

// OpenContext is Open that gives up when ctx is done, with an error
// wrapping ctx.Err(): while it waits for multiple mount protection (11 s or
// more), and between the journal replay's steps. A cancelled open leaves the
// image as consistent as it found it: the journal still needs recovery
// (the next open replays all of it again) and the MMP block holds the
// sequence it had.
func OpenContext(ctx context.Context, dev blockdev.Device, opts Options) (v *Volume, err error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("ext4io: open: %w", err)
	}
	if dev == nil {
		return nil, fmt.Errorf("ext4io: open: no device: %w", ErrInvalid)
	}
	if opts.Writable || opts.Replay {
		release, cerr := blockdev.Claim(dev)
		if cerr != nil {
			return nil, fmt.Errorf("ext4io: open for writing: %w", cerr)
		}
		defer func() { // err and v are Open's results
			if err != nil {
				release()
			} else {
				v.release = release
			}
		}()
	}
	return open(ctx, dev, opts)
}

func open(ctx context.Context, dev blockdev.Device, opts Options) (*Volume, error) {
	if size := dev.Size(); size < layout.SuperblockOffset+layout.SuperblockSize {
		return nil, &errs.CorruptError{What: "superblock", Off: -1, Err: ErrNotExt4,
			Msg: fmt.Sprintf("a device of %d bytes is too small for one", size)}
	}
	buf := make([]byte, layout.SuperblockSize)
	if _, err := readFull(dev, buf, layout.SuperblockOffset); err != nil {
		return nil, fmt.Errorf("ext4io: reading superblock: %w", err)
	}
	sb, err := layout.DecodeSuperblock(buf)
	if errors.Is(err, ErrNotExt4) {
		return nil, fmt.Errorf("ext4io: no ext4 file system on the device: %w", err)
	}
	if err != nil {
		return nil, err
	}
	if bad := layout.UnsupportedIncompat(sb.FeatureIncompat, layout.IncompatSupportedRead); len(bad) > 0 {
		return nil, fmt.Errorf("ext4io: incompat feature %s: %w", strings.Join(bad, ","), ErrUnsupported)
	}
	budget := opts.CacheBudget
	if budget <= 0 {
		budget = 64 << 20
	}
	v := &Volume{dev: dev, opts: opts, sb: sb, bs: sb.BlockSize(), csumSeed: sb.CsumSeed(), csum: sb.MetadataCsum(),
		cache: newEscSet(budget, opts.Tuning.ExtentCacheSkipInRoot), inodes: make(map[uint32]*inode),
		inoWeak: make(map[uint32]weak.Pointer[inode]), inoBudget: opts.InodeCache}
	if opts.Writable && v.atomicJournalMax() > 0 {
		// Journalled atomic writes write in place in the background
		// (homewrite.go): every request is ordered after them. Without
		// them (Tuning.AtomicJournalMax < 0) v.dev is the device itself.
		v.home = volumeHome{h: newHomeWrites(), inner: dev}
		v.dev = (&homeDev{inner: dev, h: v.home.h}).wrap()
	}
	switch {
	case v.inoBudget == 0:
		v.inoBudget = defaultInodeCache
	case v.inoBudget < 0:
		v.inoBudget = math.MaxInt
	}
	v.inoSweepAt = min(v.inoBudget, 1<<20) + 1024
	v.inoBatch = min(max(v.inoBudget/256, 4), shrinkBatchMax)
	v.inoHigh = v.inoBudget
	if v.inoBudget < math.MaxInt-v.inoBatch {
		v.inoHigh += v.inoBatch / 2
	}
	v.nss.init()
	v.touch.init()
	v.bshift = uint(bits.TrailingZeros(uint(v.bs))) // bs is 1024 << s_log_block_size
	v.lbs, v.align = int64(dev.LogicalBlockSize()), dioAlign(dev)
	v.owOpts = iomap.DioOptions{BlockSize: int64(v.bs), Align: v.align, Flags: iomap.OverwriteOnly}
	if size := dev.Size(); uint64(size)/uint64(v.bs) < sb.BlocksCount {
		return nil, errs.Corruptf("superblock", 0, -1, "filesystem has %d blocks of %d bytes but the device holds %d bytes", sb.BlocksCount, v.bs, size)
	}
	if err := v.loadGroups(); err != nil {
		return nil, err
	}
	if err := v.buildZone(); err != nil {
		return nil, err
	}
	// Multiple mount protection comes before anything is written (the
	// journal replay included), as in Linux's mount.
	if opts.Writable || opts.Replay {
		if err := v.startMMP(ctx); err != nil {
			return nil, err
		}
	}
	opened := false
	defer func() {
		if !opened || !opts.Writable {
			v.stopMMP() // a failed open, or a read-only one done replaying
		}
	}()
	if sb.HasIncompat(layout.IncompatRecover) {
		if !opts.NoRecovery || opts.Writable || opts.Replay {
			if err := v.recover(ctx); err != nil {
				return nil, err
			}
		}
	}
	// Like Linux's mount: the root must be a directory in use.
	root, err := v.readInode(layout.RootIno)
	if err != nil {
		return nil, fmt.Errorf("ext4io: root inode: %w", err)
	}
	if !root.IsDir() || root.LinksCount == 0 {
		return nil, &errs.CorruptError{What: "root inode", Ino: layout.RootIno, Off: -1,
			Msg: fmt.Sprintf("not a directory in use (mode %#o, links %d)", root.Mode, root.LinksCount)}
	}
	if opts.Writable {
		if err := v.openWritable(); err != nil {
			return nil, err
		}
	}
	opened = true
	return v, nil
}

// openWritable checks that ext4io can keep the filesystem consistent,
// starts the allocator and marks the superblock as in use.
func (v *Volume) openWritable() error {
	sb := v.sb
	if bad := layout.UnsupportedIncompat(sb.FeatureIncompat, layout.IncompatSupportedWrite); len(bad) > 0 {
		return fmt.Errorf("ext4io: cannot write with incompat feature %s (a read-only open works): %w", strings.Join(bad, ","), ErrUnsupported)
	}
	if bad := layout.UnsupportedRoCompat(sb.FeatureRoCompat, layout.RoCompatSupportedWrite); len(bad) > 0 {
		return fmt.Errorf("ext4io: cannot write with ro_compat feature %s (a read-only open works): %w", strings.Join(bad, ","), ErrUnsupported)
	}
	if sb.HasIncompat(layout.IncompatRecover) {
		return fmt.Errorf("ext4io: journal needs recovery before the volume can be written: %w", ErrUnsupported)
	}
	if sb.State&layout.StateErrors != 0 {
		return fmt.Errorf("ext4io: filesystem has errors recorded (run e2fsck): %w", ErrReadOnly)
	}
	v.meta = alloc.NewDirectIO(v.dev, v.bs)
	v.mcache = newMetaCache(v.bs, v.opts.MetaCacheBytes)
	switch {
	case sb.HasCompat(layout.CompatHasJournal) && !v.opts.Tuning.NoJournal:
		if err := v.startJournal(); err != nil {
			return err
		}
		if err := v.startFastCommit(); err != nil {
			return err
		}
	case v.opts.Tuning.NoJournal:
		if v.mcache == nil {
			v.mcache = newMetaCache(v.bs, 0) // write-back needs the cache
		}
		v.meta = &cachedIO{dev: v.meta, c: v.mcache, writeBack: true, devW: v.dev, bs: v.bs}
	case v.mcache != nil:
		v.meta = &cachedIO{dev: v.meta, c: v.mcache}
	}
	if c := v.opts.Tuning.ZeroOutChunk; c < 0 || c > maxZeroOutChunk || c%int64(v.bs) != 0 {
		return fmt.Errorf("ext4io: ZeroOutChunk %d is not a multiple of the %d-byte block size between 0 and %d: %w", c, v.bs, maxZeroOutChunk, ErrInvalid)
	}
	v.zchunk = uint64(v.opts.Tuning.ZeroOutChunk) / uint64(v.bs)
	aopts := alloc.Options{NoReservedPool: v.opts.Tuning.ReservedPool < 0}
	if v.opts.Tuning.ReservedPool > 0 {
		aopts.ReservedPool = uint64(v.opts.Tuning.ReservedPool)
	}
	a, err := alloc.New(sb, v.meta, aopts)
	if err != nil {
		return err
	}
	v.alloc = a
	v.queueConv = v.jm != nil && !v.opts.Tuning.EagerConversions && !v.opts.Tuning.DeferSplits && v.zchunk == 0
	v.convInodes = map[*inode]struct{}{}
	v.convResv.init(v.bs)
	if pcb := v.opts.PageCacheBytes; pcb >= 0 {
		if pcb == 0 {
			pcb = 64 << 20
		}
		v.pc, err = iomap.NewPageCache(v.dev, iomap.PageCacheOptions{PageSize: v.bs, MaxPages: int(max(pcb/int64(v.bs), 16)),
			NoInlineWriteback: true, NoReadCache: true})
		if err != nil {
			return err
		}
	}
	v.orphanPresent.Store(sb.HasRoCompat(layout.RoCompatOrphanPresent))
	now := wallclock.Seconds()
	v.sbMu.Lock()
	sb.State &^= layout.StateValid
	sb.MntCount++
	sb.Mtime = now
	sb.Wtime = now
	// needs_recovery must be on disk before the first commit.
	err = v.writeSuperDirectLocked()
	v.sbMu.Unlock()
	if err != nil {
		return err
	}
	if err := v.flushDev(); err != nil {
		return err
	}
	// Finish what a crash left on the orphan list, as Linux does at mount:
	// large files in steps first.
	if v.jm != nil {
		inos, err := v.orphanList()
		if err != nil {
			return err
		}
		for _, ino := range inos {
			if err := v.orphanSteps(ino, false); err != nil {
				return err
			}
		}
	}
	if err := v.processOrphans(); err != nil {
		return err
	}
	if age := v.opts.WritebackAge; v.pc != nil && age >= 0 {
		if age == 0 {
			age = 5 * time.Second
		}
		age = max(age, minTimerInterval)
		if err := v.pc.StartFlusher(min(age, time.Second), age); err != nil {
			return err
		}
	}
	if every := v.opts.CommitInterval; v.jm != nil && every >= 0 {
		if every == 0 {
			every = 5 * time.Second
		}
		v.jm.startCommitter(max(every, minTimerInterval))
	}
	return nil
}

// minTimerInterval is the shortest WritebackAge and CommitInterval: the
// background flusher and committer tick at most this often, so that a tiny
// duration does not keep their goroutines running back to back.
const minTimerInterval = time.Millisecond

// encodeSuperLocked encodes the superblock with the orphan_present flag
// as the volume currently has it (kept outside v.sb, whose feature words
// are read without sbMu).
func (v *Volume) encodeSuperLocked() []byte {
	c := *v.sb
	if v.unmounted {
		c.FeatureIncompat &^= layout.IncompatRecover
	}
	if v.alloc != nil {
		if v.orphanPresent.Load() {
			c.FeatureRoCompat |= layout.RoCompatOrphanPresent
		} else {
			c.FeatureRoCompat &^= layout.RoCompatOrphanPresent
		}
	}
	return c.Encode()
}

// writeSuperDirectLocked writes the primary superblock straight to the
// device (mount, unmount, recovery). Backups are left as they are, as the
// kernel leaves them.
func (v *Volume) writeSuperDirectLocked() error {
	if _, err := v.dev.WriteAt(v.encodeSuperLocked(), layout.SuperblockOffset); err != nil {
		return fmt.Errorf("ext4io: writing superblock: %w", wrapIO(err))
	}
	return nil
}

// writeSuperLocked writes the superblock as part of the current operation:
// through the journal on a journaled volume (so that, say, an orphan list
// change commits with the inode it concerns), directly otherwise.
func (v *Volume) writeSuperLocked() error {
	if v.jm == nil {
		return v.writeSuperDirectLocked()
	}
	blk := uint64(layout.SuperblockOffset / v.bs)
	off := layout.SuperblockOffset % v.bs
	b, err := v.meta.GetWrite(blk)
	if err != nil {
		return err
	}
	copy(b[off:], v.encodeSuperLocked())
	return v.meta.Dirty(blk, b)
}

func (v *Volume) flushDev() error {
	if err := v.writeBackMeta(); err != nil {
		return err
	}
	if err := v.dev.Flush(); err != nil {
		return fmt.Errorf("ext4io: flush: %w", wrapIO(err))
	}
	return nil
}

func wrapIO(err error) error {
	if errors.Is(err, ErrIO) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrIO, err)
}

// Writable reports whether the volume was opened read-write (false for
// the zero Volume).
func (v *Volume) Writable() bool { return v != nil && v.alloc != nil }

// OpenImage opens the image file (or block device) at path with the file
// backend, or the export of an NBD server when path is an NBD URI
// (nbd://host[:port]/export, nbd+unix:///export?socket=PATH; see
// nbd.ParseURI), read-only unless opts.Writable or opts.Replay. Close
// closes the file or connection too.
func OpenImage(path string, opts Options) (*Volume, error) {
	ro := !opts.Writable && !opts.Replay
	var dev blockdev.Device
	var err error
	if nbd.IsURI(path) {
		dev, err = nbd.Open(path, nbd.Options{ReadOnly: ro})
	} else {
		dev, err = blockdev.OpenFile(path, ro)
	}
	if err != nil {
		return nil, err
	}
	v, err := Open(dev, opts)
	if err != nil {
		dev.Close()
		return nil, err
	}
	v.closeDev = true
	return v, nil
}

func (v *Volume) loadGroups() error {
	n := v.sb.GroupCount()
	ds := v.sb.DescriptorSize()
	v.groups = make([]*layout.GroupDesc, n)
	var blk uint64 = ^uint64(0)
	buf := make([]byte, v.bs)
	for g := uint64(0); g < n; g++ {
		b, off := v.sb.DescriptorLocation(g)
		if b != blk {
			if b >= v.sb.BlocksCount {
				return errs.Corruptf("group descriptor table", b, -1, "group %d: descriptor block beyond filesystem end", g)
			}
			if err := v.readBlock(b, buf); err != nil {
				return fmt.Errorf("ext4io: reading group descriptors: %w", err)
			}
			blk = b
		}
		gd, err := layout.DecodeGroupDesc(buf[off:off+ds], ds)
		if err != nil {
			return err
		}
		if v.opts.SkipChecksums {
			save := gd.Checksum
			gd.Checksum = layout.GroupDescChecksum(v.sb, uint32(g), gd.Raw)
			err = gd.Verify(v.sb, uint32(g), b)
			gd.Checksum = save
		} else {
			err = gd.Verify(v.sb, uint32(g), b)
		}
		if err != nil {
			return err
		}
		v.groups[g] = gd
	}
	return nil
}

// CacheStats returns the extent-status cache's counters, summed over its
// stripes (the cache is striped by file region; Inodes counts per-stripe
// trees, up to 8 per inode): the hit rate and memory benchmarks report
// (ext4io bench reports them beside Counters).
func (v *Volume) CacheStats() esc.Stats {
	if v == nil || v.cache == nil {
		return esc.Stats{}
	}
	return v.cache.Stats()
}

// Superblock returns a copy of the superblock (the zero Superblock for
// the zero Volume): the geometry, features and state that tools print
// or check (cmd/ext4io's info and journal commands). Changing the copy
// changes nothing on the volume.
func (v *Volume) Superblock() layout.Superblock {
	if v == nil || v.sb == nil {
		return layout.Superblock{}
	}
	v.sbMu.Lock()
	defer v.sbMu.Unlock()
	c := *v.sb
	if v.unmounted {
		c.FeatureIncompat &^= layout.IncompatRecover
	}
	if v.alloc != nil && v.orphanPresent.Load() {
		c.FeatureRoCompat |= layout.RoCompatOrphanPresent
	}
	return c
}

// BlockSize returns the filesystem block size in bytes.
func (v *Volume) BlockSize() int {
	if v == nil {
		return 0
	}
	return v.bs
}

// Close releases the volume (and the device, if OpenImage opened it).
// A second Close returns an error matching ErrClosed, as os.File's does.
// Files of the volume may be in use while it closes: a call that began
// before Close either completes (a metadata change it made is in the
// closed image) or fails with an error matching ErrClosed, and later
// calls fail with ErrClosed. Close waits for the writes and
// metadata-changing operations in flight, with or without a journal.
//
// Closing a writable volume writes the free counts, marks the superblock
// clean and flushes the device; the first error is returned and the
// volume is closed regardless.
func (v *Volume) Close() error {
	if v == nil || v.sb == nil {
		return errNotOpen
	}
	if v.closed.Swap(true) {
		return fmt.Errorf("ext4io: closing the volume again: %w", ErrClosed)
	}
	var err error
	if v.alloc != nil {
		// Wait for the operations in flight: those that enter the
		// gate from now on see closed and fail with ErrClosed.
		v.txnGate.Lock()
		//lint:ignore SA2001 a barrier: taking the gate waits out the operations holding it
		v.txnGate.Unlock()
		v.drainInodeWriters()
		v.home.h.waitAll() // journalled pages written in place (homewrite.go)
		v.trimMu.Lock()
		//lint:ignore SA2001 a barrier: taking the lock waits out the Trims holding it
		v.trimMu.Unlock()
		err = v.unmount()
	}
	if merr := v.stopMMP(); err == nil {
		err = merr
	}
	v.touch.close()
	if v.release != nil {
		v.release()
	}
	if v.closeDev {
		if cerr := v.dev.Close(); err == nil {
			err = cerr
		}
	}
	return err
}

// drainInodeWriters waits out the writes of data that run outside any
// operation (File.directOverwrite and File.atomicInPlace into written
// blocks, File.writeBufferedOnce into the page cache: they take no
// txnGate, so that commits never hold them up). Each holds its inode's
// lock and checks v.closed under it, so once Close has set closed, taking
// every inode's lock exclusively once waits for those in flight, and the
// later ones fail.
func (v *Volume) drainInodeWriters() {
	v.inoMu.Lock()
	ns := make([]*inode, 0, len(v.inodes))
	for _, n := range v.inodes {
		ns = append(ns, n)
	}
	v.inoMu.Unlock()
	for _, n := range ns {
		n.mu.Lock()
		//lint:ignore SA2001 a barrier: taking the lock waits out the writes holding it
		n.mu.Unlock()
	}
}

func (v *Volume) unmount() error {
	// abandon stops the journal after a failure, checkpointing only what
	// committed; the superblock keeps needs_recovery.
	abandon := func(err error) error {
		if v.jm != nil {
			err = errs.Join(err, v.jm.j.Close())
		}
		return err
	}
	if v.jm != nil {
		v.jm.stopCommitter()
	}
	if v.pc != nil {
		v.pc.StopFlusher()
		if v.failed() == nil {
			if err := v.pc.Sync(); err != nil {
				return abandon(fmt.Errorf("ext4io: writing back cached data: %w", err))
			}
		}
		defer v.pc.Close()
	}
	if v.failed() == nil {
		if err := v.writeDirtyInodes(); err != nil {
			return abandon(err)
		}
		if err := v.stepOrphans(true); err != nil {
			return abandon(err)
		}
		if err := v.beginInternalOp(); err != nil {
			return abandon(err)
		}
		if err := v.endOpErr(v.releaseOrphans(true)); err != nil {
			return abandon(err)
		}
	}
	if err := v.stopJournal(); err != nil {
		// The superblock keeps needs_recovery and "not clean": the next
		// open recovers from the journal's last consistent state.
		return err
	}
	if err := v.mmpFailed(); err != nil {
		return err // another node has the filesystem: leave it alone
	}
	v.sbMu.Lock()
	defer v.sbMu.Unlock()
	if err := v.flushDev(); err != nil { // data and metadata before "clean"
		return err
	}
	v.alloc.FillSuperblock(v.sb)
	v.unmounted = true
	v.sb.State |= layout.StateValid
	v.sb.Wtime = wallclock.Seconds()
	// The flush above put data and metadata on disk before "clean", and
	// nothing dirties metadata since (the journal is stopped, sbMu held):
	// the superblock needs only to be durable itself, one FUA-style write.
	if _, err := blockdev.WriteAtSync(v.dev, v.encodeSuperLocked(), layout.SuperblockOffset); err != nil {
		return fmt.Errorf("ext4io: writing superblock: %w", wrapIO(err))
	}
	return nil
}

// checkOpen returns an error matching ErrClosed after Close, ErrInvalid
// for the zero Volume, and nil while the volume is open.
func (v *Volume) checkOpen() error {
	if v == nil || v.sb == nil {
		return errNotOpen
	}
	if v.closed.Load() {
		return fmt.Errorf("ext4io: volume is closed: %w", ErrClosed)
	}
	return nil
}

// readBlock reads metadata block blk into buf (len(buf) == block size),
// through the metadata layer on writable volumes so that blocks changed in
// a running transaction are seen.
func (v *Volume) readBlock(blk uint64, buf []byte) error {
	if blk >= v.sb.BlocksCount {
		return errs.Corruptf("block pointer", blk, -1, "block %d beyond filesystem end %d", blk, v.sb.BlocksCount)
	}
	if r, ok := v.meta.(metaReaderInto); ok {
		return r.readInto(blk, buf)
	}
	if v.meta != nil {
		b, err := v.meta.Read(blk)
		if err != nil {
			return err
		}
		copy(buf, b)
		return nil
	}
	_, err := readFull(v.dev, buf, int64(blk)*int64(v.bs))
	return err
}

// inodeGoal returns the first block of inode ino's group, the allocation
// goal for its first blocks.
func (v *Volume) inodeGoal(ino uint32) uint64 {
	g, _ := v.sb.InodeLocation(ino)
	return v.sb.GroupFirstBlock(g)
}

// Counters are the write path's event counts, for benchmarks and for tests
// that prove the fast paths are taken.
type Counters struct {
	// MetaUpdates counts metadata updates: inode writes (with the tree
	// and bitmap changes made with them) and extended-attribute block writes,
	// each logged in the running journal transaction on a volume with a
	// journal. Overwrites of written blocks make none.
	MetaUpdates uint64
	// SharedLocks and ExclusiveLocks count writes by inode lock mode.
	SharedLocks, ExclusiveLocks uint64
	// Conversions counts unwritten-to-written conversions.
	Conversions uint64
	// ZeroOutBlocks counts blocks zeroed: with the device's ZeroOut, or
	// with zero writes for Options.Tuning.ZeroOutChunk.
	ZeroOutBlocks uint64
	// Overwrites counts writes that changed no metadata (shared-lock
	// direct writes; one still in flight counts until it turns out to
	// need a conversion or the exclusive lock).
	Overwrites uint64
	// JournalCommits counts batches of metadata updates logged to the
	// journal (each one or more jbd2 handles in one transaction).
	JournalCommits uint64
	// JournalTransactions counts jbd2 transactions committed to the log
	// since the volume opened; concurrent fsyncs share them (group
	// commit).
	JournalTransactions uint64
	// JournalLogBlocks counts the blocks those transactions wrote to the
	// log (descriptors, revoke and commit blocks, and each metadata block
	// once per transaction however often it changed in it).
	JournalLogBlocks uint64
	// JournalCheckpoints counts checkpoint rounds (committed transactions'
	// blocks written home to free log space and the memory of their
	// copies); JournalSpaceWaits counts journal handles that found the log
	// short of space, or the copies over twice their bound
	// (MetaCacheBytes), and waited for, or ran, a commit or checkpoint
	// first (journal.Stats.SpaceWaits).
	JournalCheckpoints, JournalSpaceWaits uint64
	// BufferedWrites counts writes through the page cache (no journal
	// handle, no metadata update); DelallocBlocks counts blocks allocated
	// for them at write-back.
	BufferedWrites, DelallocBlocks uint64
	// ReservedBlocks is the number of blocks reserved now for buffered
	// data not yet written back (a gauge, not a count).
	ReservedBlocks uint64
	// SplitsDeferred counts direct writes into unwritten blocks whose
	// extent split was left to I/O completion (Options.Tuning.DeferSplits).
	SplitsDeferred uint64
	// ConversionsQueued counts direct writes into unwritten blocks whose
	// conversion was queued for the extent tree at completion (also
	// counted in Conversions); ConversionBatches counts the times a queue
	// was applied to a tree.
	ConversionsQueued, ConversionBatches uint64
	// FastCommits counts fast commits written (fcwrite.go);
	// FastCommitFallbacks counts Syncs that committed the journal instead
	// because the changes were not eligible; FastCommitShared counts
	// Syncs that returned with a fast commit another Sync wrote for both
	// (concurrent fsyncs share fast commits).
	FastCommits, FastCommitFallbacks, FastCommitShared uint64
	// InodeEvictions counts inodes the inode cache let go of to stay
	// within Options.InodeCache (unused and clean; read again on the next
	// use).
	InodeEvictions uint64
	// AtomicJournalled counts atomic writes written through the journal
	// and in place (Tuning.AtomicJournalMax) rather than remapped.
	AtomicJournalled uint64
}

// Counters returns a snapshot of the volume's counters.
func (v *Volume) Counters() Counters {
	s := &v.stats
	notOver := s.sharedNotOverwrite.Load() // before shared: never more than it
	shared := s.shared.Load()
	c := Counters{MetaUpdates: s.metaUpdates.Load(), SharedLocks: shared, ExclusiveLocks: s.exclusive.Load(),
		Conversions: s.conversions.Load() + s.convQueued.Load(), ZeroOutBlocks: s.zeroOuts.Load(), Overwrites: shared - notOver,
		JournalCommits: s.handles.Load(), BufferedWrites: s.buffered.Load(), DelallocBlocks: s.delalloc.Load(),
		ReservedBlocks: v.reserved(), SplitsDeferred: s.splitsDeferred.Load(),
		ConversionsQueued: s.convQueued.Load(), ConversionBatches: s.convBatches.Load(),
		JournalTransactions: v.journalTransactions(), JournalLogBlocks: v.journalLogBlocks(),
		InodeEvictions: s.inodeEvictions.Load(), AtomicJournalled: s.atomicJournalled.Load()}
	if m := v.jm; m != nil {
		st := m.j.Stats()
		c.JournalCheckpoints, c.JournalSpaceWaits = st.Checkpoints, st.SpaceWaits
	}
	if fc := v.fc; fc != nil {
		c.FastCommits, c.FastCommitFallbacks = fc.commits.Load(), fc.fallbacks.Load()
		c.FastCommitShared = fc.group.shared.Load()
	}
	return c
}

// journalLogBlocks returns the blocks the journal wrote to its log, or 0
// on a volume without a running journal.
func (v *Volume) journalLogBlocks() uint64 {
	if m := v.jm; m != nil {
		return m.j.Stats().LogBlocks
	}
	return 0
}

// journalTransactions returns the transactions the journal committed, or 0
// on a volume without a running journal.
func (v *Volume) journalTransactions() uint64 {
	if m := v.jm; m != nil {
		return m.j.Stats().Commits
	}
	return 0
}

func (v *Volume) reserved() uint64 {
	if v.alloc == nil {
		return 0
	}
	return v.alloc.Reserved()
}

// zeroBlocks makes n blocks at pblk read as zeroes on the device: with
// the device's ZeroOut, or with write set, with ordinary writes of zeroes
// (Options.Tuning.ZeroOutChunk; see blockdev.WriteZeroes).
func (v *Volume) zeroBlocks(pblk, n uint64, write bool) error {
	v.stats.zeroOuts.Add(n)
	off, length := int64(pblk)*int64(v.bs), int64(n)*int64(v.bs)
	zero := v.dev.ZeroOut
	if write {
		zero = func(off, n int64) error { return blockdev.WriteZeroes(v.dev, off, n) }
	}
	if err := zero(off, length); err != nil {
		return fmt.Errorf("ext4io: zeroing blocks %d+%d: %w", pblk, n, wrapIO(err))
	}
	return nil
}

// readFull reads len(buf) bytes at off; a short read is an I/O error.
func readFull(dev blockdev.Device, buf []byte, off int64) (int, error) {
	n, err := dev.ReadAt(buf, off)
	if n == len(buf) {
		return n, nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		err = fmt.Errorf("ext4io: short read of %d bytes at %d (device size %d): %w", len(buf), off, dev.Size(), ErrIO)
	} else if !errors.Is(err, ErrIO) {
		err = fmt.Errorf("ext4io: read at %d: %w: %w", off, ErrIO, err)
	}
	return n, err
}
