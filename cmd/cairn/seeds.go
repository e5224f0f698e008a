package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/cairnhq/cairn/internal/service"
	"github.com/cairnhq/cairn/pkg/identity"
)

// cmdSeeds makes, offline, the signing seed of every service that has none in DIR
// (<service>.seed, mode 0600), and prints each service's public key: for a deployment that
// gives each service its seed as a secret (deploy/k8s: kubectl create secret generic
// cairn-signing-seeds --from-file=DIR). A seed is never overwritten.
func cmdSeeds(_ context.Context, args []string) error {
	if len(args) != 1 {
		return fmt.Errorf("%w: seeds DIR", errUsage)
	}
	dir := args[0]
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for _, name := range service.Services() {
		path := filepath.Join(dir, name+".seed")
		seed, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			s, gerr := identity.NewSeed()
			if gerr != nil {
				return gerr
			}
			seed = []byte(s + "\n")
			f, oerr := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
			if oerr != nil {
				return oerr
			}
			if _, werr := f.Write(seed); werr != nil {
				f.Close()
				return werr
			}
			if err = f.Close(); err != nil {
				return err
			}
		} else if err != nil {
			return err
		}
		pub, err := identity.PublicKeyOf(string(seed))
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		fmt.Printf("%-14s %s\n", name, pub)
	}
	return nil
}
