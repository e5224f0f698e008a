// Package artifacts stores step outputs: small ones inline in the checkpoint, larger ones in
// the object store under content-addressed names that are never overwritten, and every read
// checks the digest the checkpoint recorded.
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

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// InlineMax is the largest output kept inline in the checkpoint.
const InlineMax = 1024

// ErrDigest: what was read is not what the checkpoint recorded.
var ErrDigest = errors.New("artifact digest mismatch")

// Store keeps outputs in an object store bucket.
type Store struct {
	obj jetstream.ObjectStore
}

// Open looks up the object store bucket.
func Open(ctx context.Context, js jetstream.JetStream, bucket string) (*Store, error) {
	obj, err := js.ObjectStore(ctx, bucket)
	if err != nil {
		return nil, fmt.Errorf("looking up object store %q: %w", bucket, err)
	}
	return &Store{obj: obj}, nil
}

// Digest is NATS's form: SHA-256=<base64url>.
func Digest(b []byte) string {
	h := sha256.Sum256(b)
	return "SHA-256=" + base64.URLEncoding.EncodeToString(h[:])
}

// Save returns the checkpoint's pointer to data: inline when data is JSON of at most InlineMax
// bytes, else an object named <run>/<step>/<sha256 hex>, written only if it is not there yet.
func (s *Store) Save(ctx context.Context, runID, step string, data []byte) (*kvcheckpoint.Output, error) {
	out := &kvcheckpoint.Output{Digest: Digest(data), Size: int64(len(data))}
	if len(data) <= InlineMax && inlineStable(data) {
		out.Inline = json.RawMessage(bytes.Clone(data))
		return out, nil
	}
	h := sha256.Sum256(data)
	name := runID + "/" + step + "/" + hex.EncodeToString(h[:])
	out.Object = name
	info, err := s.obj.GetInfo(ctx, name)
	if err == nil && info.Digest == out.Digest {
		return out, nil
	}
	if err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, fmt.Errorf("looking up artifact %q: %w", name, err)
	}
	info, err = s.obj.PutBytes(ctx, name, data)
	if err != nil {
		return nil, fmt.Errorf("storing artifact %q: %w", name, err)
	}
	if info.Digest != out.Digest {
		return nil, fmt.Errorf("storing artifact %q: stored %s, want %s: %w", name, info.Digest, out.Digest, ErrDigest)
	}
	return out, nil
}

// Load returns the bytes an output points at, checking the digest.
func (s *Store) Load(ctx context.Context, out *kvcheckpoint.Output) ([]byte, error) {
	if out == nil {
		return nil, errors.New("loading artifact: no output recorded")
	}
	var data []byte
	if out.Object == "" {
		data = out.Inline
	} else {
		r, err := s.obj.Get(ctx, out.Object)
		if err != nil {
			return nil, fmt.Errorf("loading artifact %q: %w", out.Object, err)
		}
		defer r.Close()
		data, err = io.ReadAll(r)
		if err != nil {
			return nil, fmt.Errorf("loading artifact %q: %w", out.Object, err)
		}
	}
	if got := Digest(data); got != out.Digest {
		return nil, fmt.Errorf("artifact %q is %s, the checkpoint says %s: %w", out.Object, got, out.Digest, ErrDigest)
	}
	return data, nil
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
