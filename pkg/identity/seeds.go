package identity

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/pkg/assets"
)

// The permissions of a seed and of the folder Cairn writes seeds in: the user the services
// run as alone.
const (
	SeedMode    fs.FileMode = 0o600
	SeedDirMode fs.FileMode = 0o700
)

// privateDir takes from folder dir any permission beyond SeedDirMode.
func privateDir(dir string) error {
	info, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if perm := info.Mode().Perm(); perm&^SeedDirMode != 0 {
		if err := os.Chmod(dir, perm&SeedDirMode); err != nil {
			return fmt.Errorf("the seeds' folder %s is %v, open to others: %w", dir, perm, err)
		}
	}
	return nil
}

// SeedFile is where service name's seed is kept in a folder of seeds.
func SeedFile(dir, name string) string { return filepath.Join(dir, name+".seed") }

// EnsureSeed returns the public key of service name's seed, dir/<name>.seed, making the
// folder (0700) and the seed (0600) when missing; a seed is never overwritten. A folder that
// exists open to others (0755) is made 0700 before a seed is written in it; a folder it only
// reads seeds from is left as it is (a mounted secret may be read-only).
func EnsureSeed(dir, name string) (string, error) {
	if err := os.MkdirAll(dir, SeedDirMode); err != nil {
		return "", err
	}
	path := SeedFile(dir, name)
	seed, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		if err := privateDir(dir); err != nil {
			return "", err
		}
		s, gerr := NewSeed()
		if gerr != nil {
			return "", gerr
		}
		seed = []byte(s + "\n")
		f, oerr := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, SeedMode)
		if oerr != nil {
			return "", oerr
		}
		_, err = f.Write(seed)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		return "", err
	}
	pub, err := PublicKeyOf(strings.TrimSpace(string(seed)))
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return pub, nil
}

// SignerFrom reads service name's seed from dir/<name>.seed.
func SignerFrom(dir, name string) (*Signer, error) {
	b, err := os.ReadFile(SeedFile(dir, name))
	if err != nil {
		return nil, fmt.Errorf("the signing seed of service %s: %w", name, err)
	}
	return NewSigner(name, strings.TrimSpace(string(b)))
}

// RegisterSeeds registers the public key of every named service in the keys bucket, from
// its seed in dir (made there when missing), and records the seal once (the package doc):
// the admin's work, as cairn init does it. It returns the seal that holds. The bucket and
// the sealed streams are space sp's.
func RegisterSeeds(ctx context.Context, js jetstream.JetStream, sp assets.Space, dir string, names ...string) (Seal, error) {
	kv, err := js.KeyValue(ctx, sp.Bucket(Bucket))
	if err != nil {
		return Seal{}, fmt.Errorf("looking up bucket %s: %w", sp.Bucket(Bucket), err)
	}
	for _, name := range names {
		pub, err := EnsureSeed(dir, name)
		if err != nil {
			return Seal{}, err
		}
		if have, err := Registered(ctx, kv, name); err != nil {
			return Seal{}, err
		} else if have != pub {
			if err := Register(ctx, kv, name, pub); err != nil {
				return Seal{}, err
			}
		}
	}
	seal := Seal{At: time.Now().UTC().Format(time.RFC3339)}
	for stream, seq := range map[string]*uint64{"KV_" + sp.Bucket(assets.BucketRuns): &seal.Runs, sp.Stream(assets.StreamSaga): &seal.Saga, sp.Stream(assets.StreamOutbox): &seal.Outbox} {
		st, err := js.Stream(ctx, stream)
		if err != nil {
			return Seal{}, fmt.Errorf("sealing: stream %s: %w", stream, err)
		}
		*seq = st.CachedInfo().State.LastSeq
	}
	return SealOnce(ctx, kv, seal)
}
