package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/internal/night"
	"github.com/cairnhq/cairn/pkg/app"
	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/identity"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/pipeline"
)

// pipelineRuns is one pipeline's checkpoint bucket, for the commands that read every
// pipeline's runs: the reference night's (the default space) and each one registered in
// app.BucketPipelines (its own space).
type pipelineRuns struct {
	name  string
	space assets.Space
	store *kc.Store
	def   pipeline.Definition // the night's, or what a registered pipeline's Init recorded of its
}

// openPipelines opens the runs of the night and of every registered pipeline, each checked
// as its services read it (openRuns); with only, of that pipeline alone. The night's bucket
// missing on a NATS that hosts other pipelines is no error: the night is not run there.
func openPipelines(ctx context.Context, js jetstream.JetStream, only string) ([]pipelineRuns, error) {
	regs, err := app.All(ctx, js)
	if err != nil {
		return nil, err
	}
	var out []pipelineRuns
	if only == "" || only == night.Pipeline.Name {
		store, err := openRuns(ctx, js)
		switch {
		case err == nil:
			out = append(out, pipelineRuns{name: night.Pipeline.Name, store: store, def: night.Pipeline})
		case only != "" || len(regs) == 0 || !errors.Is(err, jetstream.ErrBucketNotFound):
			return nil, err
		}
	}
	for _, r := range regs {
		if r.Name == night.Pipeline.Name || (only != "" && r.Name != only) {
			continue
		}
		sp, err := r.Space()
		if err != nil {
			return nil, fmt.Errorf("registered pipeline %q: %w", r.Name, err)
		}
		ring, err := identity.OpenRing(ctx, js, sp)
		if err != nil {
			return nil, fmt.Errorf("pipeline %s: %w", r.Name, err)
		}
		store, err := kc.Open(ctx, js, sp.Bucket(assets.BucketRuns), kc.WithRing(ring), kc.WithPipeline(r.Definition().Names()))
		if err != nil {
			return nil, fmt.Errorf("pipeline %s: %w", r.Name, err)
		}
		out = append(out, pipelineRuns{name: r.Name, space: sp, store: store, def: r.Definition()})
	}
	if only != "" && len(out) == 0 {
		_, err := app.Registered(ctx, js, only)
		return nil, fmt.Errorf("%w: --pipeline: %v (or %s, the reference night)", errUsage, err, night.Pipeline.Name)
	}
	return out, nil
}

// openOne opens the runs of pipeline name, the reference night's when name is "".
func openOne(ctx context.Context, js jetstream.JetStream, name string) (pipelineRuns, error) {
	if name == "" {
		store, err := openRuns(ctx, js)
		return pipelineRuns{name: night.Pipeline.Name, store: store, def: night.Pipeline}, err
	}
	ps, err := openPipelines(ctx, js, name)
	if err != nil {
		return pipelineRuns{}, err
	}
	return ps[0], nil
}

// initRegistered creates and checks the assets of every registered pipeline (app.Init made
// them; a release may change their definitions) and says so for each.
func initRegistered(ctx context.Context, js jetstream.JetStream) error {
	regs, err := app.All(ctx, js)
	if err != nil {
		return err
	}
	for _, r := range regs {
		if r.Name == night.Pipeline.Name {
			continue
		}
		c, err := r.Assets()
		if err != nil {
			return fmt.Errorf("registered pipeline %q: %w", r.Name, err)
		}
		changed, err := assets.EnsureReport(ctx, js, c)
		if err != nil {
			return fmt.Errorf("pipeline %s: %w", r.Name, err)
		}
		for _, ch := range changed {
			fmt.Printf("pipeline %s: updated %s\n", r.Name, ch)
		}
		fmt.Printf("pipeline %s: every asset exists and matches its definition (%s, %s)\n", r.Name, c.Space.Stream(assets.StreamRuns), c.Space.Bucket(assets.BucketRuns))
	}
	return nil
}

// cmdPermissions prints the NATS user a registered pipeline's services connect as: its
// assets.Permissions, in the form of deploy/nats/accounts.conf's users; with --service, the
// user of that one service (app.Registration.ServicePermissions), named <pipeline>-<service>.
func cmdPermissions(ctx context.Context, args []string) error {
	return runPermissions(ctx, os.Stdout, args)
}

func runPermissions(ctx context.Context, out io.Writer, args []string) error {
	fs := flag.NewFlagSet("permissions", flag.ContinueOnError)
	name := fs.String("pipeline", "", "the registered pipeline")
	service := fs.String("service", "", "one service of the pipeline (a step, supervisor, outbox-sender or compensator): its own user")
	raw := fs.Bool("json", false, "print the allow lists as JSON")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 || *name == "" {
		return fmt.Errorf("%w: permissions --pipeline NAME [--service SERVICE] [--json]", errUsage)
	}
	_, nc, js, err := connect("cli")
	if err != nil {
		return err
	}
	defer nc.Close()
	r, err := app.Registered(ctx, js, *name)
	if err != nil {
		return err
	}
	c, err := r.Assets()
	if err != nil {
		return err
	}
	user, inbox := r.Name, c.Space.Inbox()
	header := fmt.Sprintf(`# Pipeline %[1]s: its services connect as this user, with their replies under
# %[2]s (nats.CustomInboxPrefix). It may use its own streams, buckets and subjects
# (cairn.%[1]s.>) and nothing of another pipeline's; creating, changing or removing them
# (its durables included) is admin's.
`, r.Name, inbox)
	p := c.Permissions()
	if *service != "" {
		p, err = r.ServicePermissions(*service)
		if errors.Is(err, app.ErrNoService) {
			return fmt.Errorf("%w: --service: %v", errUsage, err)
		}
		if err != nil {
			return err
		}
		user, inbox = r.Name+"-"+*service, c.Space.ServiceInbox(*service)
		header = fmt.Sprintf(`# Service %[2]s of pipeline %[1]s: it runs alone on its connection, as this user, with
# its replies under %[3]s (nats.CustomInboxPrefix). It may do what its code
# does on its pipeline's streams, buckets and subjects, and nothing of another service's
# (another step's durable or events, a write it has no part in) or of another pipeline's;
# creating, changing or removing them (its durables included) is admin's.
`, r.Name, *service, inbox)
	}
	if *raw {
		return json.NewEncoder(out).Encode(p)
	}
	list := func(subjects []string) string {
		var b strings.Builder
		for _, s := range subjects {
			fmt.Fprintf(&b, "          %q\n", s)
		}
		return b.String()
	}
	_, err = fmt.Fprintf(out, `%[1]s{
  user: %[2]s
  password: "REPLACE: nats server passwd"
  permissions: {
    publish: {
      allow: [
%[3]s      ]
      deny: [
%[5]s      ]
    }
    subscribe: {
      allow: [
%[4]s      ]
    }
    allow_responses: true
  }
}
`, header, user, list(p.Publish), list(p.Subscribe), list(p.PublishDeny))
	return err
}
