package service

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
	"github.com/cairnhq/cairn/pkg/identity"
)

// Each service signs what it writes with its own seed (package identity): CAIRN_SIGNING_SEED
// for a process of one service, else the file <service>.seed in CAIRN_SIGNING_SEED_DIR
// (default $CAIRN_DATA_DIR/keys). cairn init and cairn dev make the missing seeds there and
// register every service's public key in cairn-keys.

// seedFile is where service name's seed is kept in CAIRN_SIGNING_SEED_DIR.
func (c Config) seedFile(name string) string { return filepath.Join(c.SigningSeedDir, name+".seed") }

// Signers returns the signer of each named service, from CAIRN_SIGNING_SEED (one service)
// or CAIRN_SIGNING_SEED_DIR; a missing or bad seed is an error naming the variable.
func (c Config) Signers(names ...string) (map[string]*identity.Signer, error) {
	out := make(map[string]*identity.Signer, len(names))
	var errs []error
	if c.SigningSeed != "" && len(names) != 1 {
		return nil, fmt.Errorf("CAIRN_SIGNING_SEED is one service's seed, and this process runs %d services (%s): give each a file in CAIRN_SIGNING_SEED_DIR instead", len(names), strings.Join(names, ", "))
	}
	for _, name := range names {
		seed := strings.TrimSpace(c.SigningSeed)
		from := "CAIRN_SIGNING_SEED"
		if seed == "" {
			from = "CAIRN_SIGNING_SEED_DIR " + c.seedFile(name)
			b, err := os.ReadFile(c.seedFile(name))
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: the signing seed of service %s: %w (set CAIRN_SIGNING_SEED, or run cairn init with this CAIRN_SIGNING_SEED_DIR)", from, name, err))
				continue
			}
			seed = strings.TrimSpace(string(b))
		}
		sg, err := identity.NewSigner(name, seed)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", from, err))
			continue
		}
		out[name] = sg
	}
	return out, errors.Join(errs...)
}

// EnsureSeed returns the public key of service name's seed, dir/<name>.seed, making the
// folder (0700) and the seed (0600) when missing; a seed is never overwritten.
func EnsureSeed(dir, name string) (string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	path := filepath.Join(dir, name+".seed")
	seed, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		s, gerr := identity.NewSeed()
		if gerr != nil {
			return "", gerr
		}
		seed = []byte(s + "\n")
		f, oerr := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
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
	pub, err := identity.PublicKeyOf(strings.TrimSpace(string(seed)))
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return pub, nil
}

// RegisterKeys registers the public key of every named service in cairn-keys, from its seed
// in CAIRN_SIGNING_SEED_DIR (made there when missing), and records the seal once (package
// identity): admin only, as cairn init and cairn dev run it. It returns the seal that holds.
func RegisterKeys(ctx context.Context, js jetstream.JetStream, c Config, names ...string) (identity.Seal, error) {
	kv, err := js.KeyValue(ctx, assets.BucketKeys)
	if err != nil {
		return identity.Seal{}, fmt.Errorf("looking up bucket %s: %w", assets.BucketKeys, err)
	}
	for _, name := range names {
		pub, err := EnsureSeed(c.SigningSeedDir, name)
		if err != nil {
			return identity.Seal{}, fmt.Errorf("CAIRN_SIGNING_SEED_DIR: %w", err)
		}
		if have, err := identity.Registered(ctx, kv, name); err != nil {
			return identity.Seal{}, err
		} else if have != pub {
			if err := identity.Register(ctx, kv, name, pub); err != nil {
				return identity.Seal{}, err
			}
		}
	}
	seal := identity.Seal{At: time.Now().UTC().Format(time.RFC3339)}
	for stream, seq := range map[string]*uint64{"KV_" + assets.BucketRuns: &seal.Runs, assets.StreamSaga: &seal.Saga, assets.StreamOutbox: &seal.Outbox} {
		st, err := js.Stream(ctx, stream)
		if err != nil {
			return identity.Seal{}, fmt.Errorf("sealing: stream %s: %w", stream, err)
		}
		*seq = st.CachedInfo().State.LastSeq
	}
	return identity.SealOnce(ctx, kv, seal)
}
