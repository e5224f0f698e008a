package main

import (
	"context"
	"fmt"

	"github.com/cairnhq/cairn/internal/service"
)

// cmdSeeds makes, offline, the signing seed of every service that has none in DIR
// (<service>.seed, mode 0600), and prints each service's public key: for a deployment that
// gives each service its seed as a secret (deploy/k8s: kubectl create secret generic
// cairn-signing-seeds --from-file=DIR). A seed is never overwritten.
func cmdSeeds(_ context.Context, args []string) error {
	if len(args) != 1 {
		return fmt.Errorf("%w: seeds DIR", errUsage)
	}
	for _, name := range service.Services() {
		pub, err := service.EnsureSeed(args[0], name)
		if err != nil {
			return err
		}
		fmt.Printf("%-14s %s\n", name, pub)
	}
	return nil
}
