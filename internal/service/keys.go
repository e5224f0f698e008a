package service

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/identity"
)

// Each service signs what it writes with its own seed (package identity): CAIRN_SIGNING_SEED
// for a process of one service, else the file <service>.seed in CAIRN_SIGNING_SEED_DIR
// (default $CAIRN_DATA_DIR/keys). cairn init and cairn dev make the missing seeds there and
// register every service's public key in cairn-keys.

// seedFile is where service name's seed is kept in CAIRN_SIGNING_SEED_DIR.
func (c Config) seedFile(name string) string { return identity.SeedFile(c.SigningSeedDir, name) }

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

// EnsureSeed returns the public key of service name's seed, dir/<name>.seed, making it
// when missing (identity.EnsureSeed).
func EnsureSeed(dir, name string) (string, error) { return identity.EnsureSeed(dir, name) }

// RegisterKeys registers the public key of every named service in cairn-keys, from its seed
// in CAIRN_SIGNING_SEED_DIR (made there when missing), and records the seal once (package
// identity): admin only, as cairn init and cairn dev run it. It returns the seal that holds.
func RegisterKeys(ctx context.Context, js jetstream.JetStream, c Config, names ...string) (identity.Seal, error) {
	seal, err := identity.RegisterSeeds(ctx, js, assets.Default, c.SigningSeedDir, names...)
	if err != nil {
		return seal, fmt.Errorf("CAIRN_SIGNING_SEED_DIR: %w", err)
	}
	return seal, nil
}
