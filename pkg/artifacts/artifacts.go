package artifacts

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/cairnhq/cairn/pkg/idempotency"
	"github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/retry"
)

// InlineMax is the largest output kept inline in the checkpoint.
const InlineMax = 1024

// loadTimeout bounds the load of one object when the caller set no deadline.
const loadTimeout = 2 * time.Minute

// maxPrealloc bounds the buffer a load sizes from the record before reading.
const maxPrealloc = 1 << 30

// ErrDigest: what was read is not what the checkpoint recorded.
var ErrDigest = errors.New("artifact digest mismatch")

// Store keeps outputs in an object store bucket.
type Store struct {
	obj    jetstream.ObjectStore
	js     jetstream.JetStream
	bucket string
	mu     sync.Mutex
	st     jetstream.Stream // the bucket's, once looked up
}

// Open looks up the object store bucket.
func Open(ctx context.Context, js jetstream.JetStream, bucket string) (*Store, error) {
	obj, err := js.ObjectStore(ctx, bucket)
	if err != nil {
		return nil, fmt.Errorf("looking up object store %q: %w", bucket, err)
	}
	return &Store{obj: obj, js: js, bucket: bucket}, nil
}

// maxChunk is the largest chunk an object is stored in: the client's default.
const maxChunk = 128 * 1024

// Digest is NATS's form: SHA-256=<base64url>.
func Digest(b []byte) string {
	h := sha256.Sum256(b)
	return digestOf(h[:])
}

func digestOf(sum []byte) string { return "SHA-256=" + base64.URLEncoding.EncodeToString(sum) }

// hexDigest is a NATS digest as "sha256:<hex>", the form idempotency conflicts name; one it
// cannot read stays as it is.
func hexDigest(d string) string {
	sum, err := base64.URLEncoding.DecodeString(strings.TrimPrefix(d, "SHA-256="))
	if !strings.HasPrefix(d, "SHA-256=") || err != nil {
		return d
	}
	return "sha256:" + hex.EncodeToString(sum)
}

// Save returns the checkpoint's pointer to data: inline when data is JSON of at most InlineMax
// bytes, else an object named <run>/<step>/<sha256 hex>, written only if it is not there yet.
// A name that holds other bytes is never overwritten: idempotency.ErrConflict, naming both
// digests.
func (s *Store) Save(ctx context.Context, runID, step string, data []byte) (*kvcheckpoint.Output, error) {
	if len(data) <= InlineMax && inlineStable(data) {
		return &kvcheckpoint.Output{Inline: json.RawMessage(bytes.Clone(data)), Digest: Digest(data), Size: int64(len(data))}, nil
	}
	return s.SaveObject(ctx, runID, step, data)
}

// SaveObject stores data as Save does, but as an object whatever its size: for what must
// not grow what points at it, such as the index of a large output's parts.
func (s *Store) SaveObject(ctx context.Context, runID, step string, data []byte) (*kvcheckpoint.Output, error) {
	out := &kvcheckpoint.Output{Digest: Digest(data), Size: int64(len(data))}
	h := sha256.Sum256(data)
	name := runID + "/" + step + "/" + hex.EncodeToString(h[:])
	out.Object = name
	info, err := s.obj.GetInfo(ctx, name)
	if err == nil && info.Digest == out.Digest {
		return out, nil
	}
	if err == nil {
		// The name is its content's digest: another content under it was written by something
		// else, and a person must look before it is replaced.
		return nil, fmt.Errorf("storing artifact %q: %w", name, idempotency.Conflict(name, hexDigest(info.Digest), hexDigest(out.Digest)))
	}
	if !errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, fmt.Errorf("looking up artifact %q: %w", name, err)
	}
	if len(data) > 0 && len(data) <= maxChunk {
		if err := s.putChunk(ctx, name, data, out.Digest); err != nil {
			return nil, fmt.Errorf("storing artifact %q: %w", name, err)
		}
		return out, nil
	}
	// The chunk buffer sized to the data: the client's default makes one of 128 KiB, cleared,
	// for every put, a small object's whole cost.
	chunk := uint32(min(max(len(data), 1), maxChunk))
	info, err = s.obj.Put(ctx, jetstream.ObjectMeta{Name: name, Opts: &jetstream.ObjectMetaOptions{ChunkSize: chunk}}, bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("storing artifact %q: %w", name, err)
	}
	if info.Digest != out.Digest {
		return nil, fmt.Errorf("storing artifact %q: stored %s, want %s: %w", name, info.Digest, out.Digest, ErrDigest)
	}
	return out, nil
}

// putChunk stores an object of one chunk (1 to maxChunk bytes) under name, not there yet (the
// caller looked), as the object store's Put does: the chunk on a subject of a fresh NUID,
// then the name's meta message, a rollup of its subject, both waited for. Put itself makes a
// JetStream context with a reply subscription of its own for every object and looks the
// name up again: most of what a small object costs.
func (s *Store) putChunk(ctx context.Context, name string, data []byte, digest string) error {
	id := nuid.Next()
	chunkSubject := "$O." + s.bucket + ".C." + id
	chunk, err := s.js.PublishMsgAsync(&nats.Msg{Subject: chunkSubject, Data: data})
	if err != nil {
		return err
	}
	info := jetstream.ObjectInfo{
		ObjectMeta: jetstream.ObjectMeta{Name: name, Opts: &jetstream.ObjectMetaOptions{ChunkSize: uint32(len(data))}},
		Bucket:     s.bucket, NUID: id, Size: uint64(len(data)), Chunks: 1, Digest: digest,
	}
	meta := nats.NewMsg("$O." + s.bucket + ".M." + base64.URLEncoding.EncodeToString([]byte(name)))
	meta.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
	if meta.Data, err = json.Marshal(info); err != nil {
		return err
	}
	_, merr := s.js.PublishMsg(ctx, meta)
	// The stream stores what one connection publishes in order: the chunk is answered by now.
	select {
	case <-chunk.Ok():
		if merr == nil {
			return nil
		}
	case err = <-chunk.Err():
	case <-ctx.Done():
		err = ctx.Err()
	}
	// Neither half is left behind without the other (a meta without its chunk would be an
	// object whose reads fail).
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if st, serr := s.js.Stream(cctx, "OBJ_"+s.bucket); serr == nil {
		if merr == nil {
			_ = st.Purge(cctx, jetstream.WithPurgeSubject(meta.Subject))
		}
		_ = st.Purge(cctx, jetstream.WithPurgeSubject(chunkSubject))
	}
	return errors.Join(merr, err)
}

// Load returns the bytes an output points at, checking the digest.
func (s *Store) Load(ctx context.Context, out *kvcheckpoint.Output) ([]byte, error) {
	var data []byte
	err := s.Read(ctx, out, func(r io.Reader) error {
		// Sized from the record: growing by doubling would hold up to twice a large output.
		buf := bytes.NewBuffer(make([]byte, 0, min(max(out.Size, 0), maxPrealloc)+bytes.MinRead))
		_, err := buf.ReadFrom(r)
		data = buf.Bytes()
		return err
	})
	return data, err
}

// Read hands read the bytes an output points at as a stream, so that a large output need
// not be held whole, then checks the digest over every byte (reading what read left): on
// a mismatch it returns ErrDigest, and whatever read made of the bytes must be dropped.
func (s *Store) Read(ctx context.Context, out *kvcheckpoint.Output, read func(io.Reader) error) error {
	if out == nil {
		return errors.New("loading artifact: no output recorded")
	}
	var src io.Reader = bytes.NewReader(out.Inline)
	if out.Object != "" {
		if _, ok := ctx.Deadline(); !ok {
			// Without a deadline each read of the object may wait only 5 s for its next
			// chunk, which a large object on a busy machine can miss.
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, loadTimeout)
			defer cancel()
		}
		obj, err := s.open(ctx, out.Object)
		if err != nil {
			return fmt.Errorf("loading artifact %q: %w", out.Object, err)
		}
		src = obj
	}
	h := sha256.New()
	fr := &failReader{r: src}
	r := io.TeeReader(fr, h)
	err := read(r)
	// The rest too, so that the digest covers every byte. Bytes other than the record says
	// are the cause of whatever read made of them.
	if _, cerr := io.Copy(io.Discard, r); cerr != nil && err == nil {
		err = cerr
	}
	if fr.err != nil {
		// The store stopped before the last byte (a leader change, a timeout, chunks that
		// did not add up to the object's own digest): what was read is a part, not other
		// bytes, and says nothing of what is stored.
		return fmt.Errorf("loading artifact %q: %w", out.Object, fr.err)
	}
	if got := digestOf(h.Sum(nil)); got != out.Digest {
		return fmt.Errorf("artifact %q is %s, the checkpoint says %s: %w", out.Object, got, out.Digest, ErrDigest)
	}
	if err != nil {
		return fmt.Errorf("loading artifact %q: %w", out.Object, err)
	}
	return nil
}

// inlineStable: data survives the record's JSON encoding byte for byte (valid, compact, no
// characters the encoder would escape), so its digest still holds when read back.
func inlineStable(data []byte) bool {
	if !json.Valid(data) {
		return false
	}
	b, err := json.Marshal(json.RawMessage(data))
	return err == nil && bytes.Equal(b, data)
}

// failReader remembers the first error its source returned other than io.EOF.
type failReader struct {
	r   io.Reader
	err error
}

func (f *failReader) Read(p []byte) (int, error) {
	n, err := f.r.Read(p)
	if err != nil && err != io.EOF && f.err == nil {
		f.err = err
	}
	return n, err
}

// chunkTimeout bounds one request for a chunk (or an object's meta); a request that fails is
// asked again, on the stream's new leader after a leader change, until the read's context ends.
const chunkTimeout = 5 * time.Second

// chunkRetry is how often: soon after a leader stopped, a replica is elected within seconds.
var chunkRetry = retry.Policy{First: 100 * time.Millisecond, Max: 2 * time.Second, Jitter: 0.1}

// notFoundTries is how many times a chunk the stream says it does not hold is asked for: a
// replica still catching up may answer a direct get, and the meta is stored after its chunks.
const notFoundTries = 5

// open reads the object name's chunks by asking the bucket's stream for each, the next
// message on the object's chunk subject after the last one read, each request bounded and
// retried on its own. The client's Get streams them through an ordered consumer, which, made
// as the stream's leader stopped, delivered nothing until the read's deadline: in 2 of 4
// tries on three servers, 2 minutes (the load's timeout), where a read asked again went on
// at once.
func (s *Store) open(ctx context.Context, name string) (io.Reader, error) {
	var info *jetstream.ObjectInfo
	err := chunkRetry.Do(ctx, retryableRead(ctx), func(int) error {
		rctx, cancel := context.WithTimeout(ctx, chunkTimeout)
		defer cancel()
		var err error
		info, err = s.obj.GetInfo(rctx, name)
		return err
	})
	if err != nil {
		return nil, err
	}
	if info.Opts != nil && info.Opts.Link != nil {
		return nil, fmt.Errorf("%s is a link, which no step writes", name)
	}
	st, err := s.stream(ctx)
	if err != nil {
		return nil, err
	}
	return &chunkReader{ctx: ctx, st: st, subject: "$O." + s.bucket + ".C." + info.NUID, left: int(info.Chunks), next: 1}, nil
}

// stream is the bucket's stream, looked up once.
func (s *Store) stream(ctx context.Context) (jetstream.Stream, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.st != nil {
		return s.st, nil
	}
	err := chunkRetry.Do(ctx, retryableRead(ctx), func(int) error {
		rctx, cancel := context.WithTimeout(ctx, chunkTimeout)
		defer cancel()
		var err error
		s.st, err = s.js.Stream(rctx, "OBJ_"+s.bucket)
		return err
	})
	return s.st, err
}

// retryableRead: any failure of a read's request is asked again while ctx lasts, but a
// missing chunk or meta only notFoundTries times, and an object that is not there not at all.
func retryableRead(ctx context.Context) func(error) bool {
	notFound := 0
	return func(err error) bool {
		switch {
		case ctx.Err() != nil, errors.Is(err, jetstream.ErrObjectNotFound):
			return false
		case errors.Is(err, jetstream.ErrMsgNotFound):
			notFound++
			return notFound < notFoundTries
		}
		return true
	}
}

// chunkReader reads an object's chunks in order, holding one at a time.
type chunkReader struct {
	ctx     context.Context
	st      jetstream.Stream
	subject string
	left    int    // chunks not read yet
	next    uint64 // the stream sequence the next chunk is at or after
	buf     []byte
}

func (c *chunkReader) Read(p []byte) (int, error) {
	for len(c.buf) == 0 {
		if c.left == 0 {
			return 0, io.EOF
		}
		var m *jetstream.RawStreamMsg
		err := chunkRetry.Do(c.ctx, retryableRead(c.ctx), func(int) error {
			rctx, cancel := context.WithTimeout(c.ctx, chunkTimeout)
			defer cancel()
			var err error
			m, err = c.st.GetMsg(rctx, c.next, jetstream.WithGetMsgSubject(c.subject))
			return err
		})
		if err != nil {
			if cerr := c.ctx.Err(); cerr != nil {
				err = cerr
			}
			return 0, fmt.Errorf("reading chunk at or after sequence %d: %w", c.next, err)
		}
		c.buf, c.next, c.left = m.Data, m.Sequence+1, c.left-1
	}
	n := copy(p, c.buf)
	c.buf = c.buf[n:]
	return n, nil
}
