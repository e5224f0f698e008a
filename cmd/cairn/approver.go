package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/events"
	"github.com/cairnhq/cairn/pkg/identity"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

const approverUsage = "approver add NAME PUBKEY [--pipeline NAME] | approver add NAME --new-seed FILE [--pipeline NAME]"

// cmdApprover registers an approver's public key in the keys bucket of the reference night,
// or with --pipeline of a registered pipeline (admin only): an approval names the approver
// whose key signed it, and a pipeline's supervisor reads its own pipeline's keys alone.
func cmdApprover(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] != "add" {
		return fmt.Errorf("%w: %s", errUsage, approverUsage)
	}
	fset := flag.NewFlagSet("approver add", flag.ContinueOnError)
	newSeed := fset.String("new-seed", "", "make a new seed in FILE (which must not exist) and register its public key")
	only := fset.String("pipeline", "", "register the approver of this registered pipeline, in its keys bucket (default: the reference night)")
	pos, err := parseArgs(fset, args[1:])
	if err != nil {
		return err
	}
	if len(pos) != 1 && len(pos) != 2 || (len(pos) == 2) == (*newSeed != "") {
		return fmt.Errorf("%w: %s", errUsage, approverUsage)
	}
	name := pos[0]
	if err := events.ValidID("approver name", name); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	// The bucket is found before a new seed is written: a seed whose key could not be
	// registered would only stand in the way of the next try (--new-seed never overwrites).
	_, nc, js, err := connect("cli")
	if err != nil {
		return err
	}
	defer nc.Close()
	kv, err := approverKeys(ctx, js, *only)
	if err != nil {
		return err
	}
	var pub string
	if len(pos) == 2 {
		pub = pos[1]
	} else {
		seed, err := identity.NewSeed()
		if err != nil {
			return err
		}
		f, err := os.OpenFile(*newSeed, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("--new-seed %s exists already: a seed is never overwritten", *newSeed)
		}
		if err != nil {
			return err
		}
		if _, err := f.WriteString(seed + "\n"); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
		if pub, err = identity.PublicKeyOf(seed); err != nil {
			return err
		}
	}
	if err := identity.RegisterApprover(ctx, kv, name, pub); err != nil {
		return err
	}
	fmt.Printf("approver %s registered with key %s\n", name, pub)
	return nil
}

// approverKeys is the keys bucket of pipeline name, whose supervisor checks its approvals:
// the reference night's when name is "".
func approverKeys(ctx context.Context, js jetstream.JetStream, name string) (jetstream.KeyValue, error) {
	var sp assets.Space // the night's
	if name != "" {
		p, err := openOne(ctx, js, name)
		if err != nil {
			return nil, err
		}
		sp = p.space
	}
	bucket := sp.Bucket(identity.Bucket)
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		return nil, fmt.Errorf("bucket %s (run cairn init): %w", bucket, err)
	}
	return kv, nil
}

// signApproval signs c, an approve of the plan r waits on, with the approver's seed in
// seedFile; without one the approve goes unsigned (and the supervisor refuses it).
func signApproval(r *kc.Record, c *events.Command, seedFile string) error {
	if seedFile == "" || r.Approval == nil {
		return nil
	}
	b, err := os.ReadFile(seedFile)
	if err != nil {
		return fmt.Errorf("--seed: %w", err)
	}
	sg, err := identity.NewSigner(c.By, strings.TrimSpace(string(b)))
	if err != nil {
		return fmt.Errorf("--seed %s: %w", seedFile, err)
	}
	sig := sg.Sign(identity.DomainApprove, identity.ApprovalMessage(r.RunID, r.Approval.PlanDigest))
	sig.Key = ""
	c.Sig = &sig
	return nil
}
