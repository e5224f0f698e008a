// Package app hosts a pipeline on Cairn: it makes the pipeline's NATS assets and signing
// keys (Init, as `cairn init` does for the reference night) and runs its services (Run): a
// step runner for each step, following the step protocol of package runner, and the
// supervisor that starts runs, takes commands and hands stalled runs to a fresh worker.
//
// A job is its steps in one list (Job, Config.Job): each made by its kind (Read, Call,
// Compute, Write, Message) from its implementation, a runner.Step, most simply a typed
// function (runner.Func: its input what it waits for, its output a Go value). Everything
// else (checkpoints, leases, fencing tokens, memoised calls, the saga of outside writes,
// handovers) is the framework's. RunLocal hosts a job whole in one process on an embedded
// NATS server. A host that keeps a job's definition apart from its implementations (the
// reference night) gives Config.Pipeline and Config.Steps instead.
//
// A step sends a message through the pipeline's outbox (runner.Attempt.Queue); the outbox
// sender, a service of its own when Config.Outbox says how messages go out, delivers each
// once and moves the finishing run to done when its last message is sent.
//
// A pipeline whose steps write to outside systems through runner.Attempt.Keyed registers
// each system's reversal (Config.Systems, by the name its effects carry in Reverse.System);
// then its compensator, a service of its own, takes the pipeline's undo commands (Command
// with events.VerbUndo, a scope selecting effects by their attributes or step) and reverses
// the run's effects newest first (package undo).
//
// Start (StartIn for any space, `cairn start` included) sends a start and returns the
// supervisor's answer: nil once the run exists, a *Refused when it refuses the start (Holder
// names the run that has the input), ErrNoAnswer when ctx ends first; Wait ends with the same
// *Refused for a refused run.
//
// Every pipeline has what the reference night has for people: approval gates
// (Config.ApprovalSteps), notices of handovers and waits by mail and signed webhook
// (Config.Notices), both read from the CAIRN_* environment by LoadSettings; and a step
// declared Irreversible waits for a person while the run's evidence is unclear (package
// runner).
//
// Open gives the Host, the one place the framework's services are made (Host.Service); Run
// uses it, as does the reference night's process. Dev hosts a pipeline whole on an embedded
// NATS server for its developer (a `dev` command of the pipeline's binary).
//
// One process may run every service (Run with no names) or one (Run with its name), so each
// step scales on its own; each service may connect as a NATS user of its own
// (Config.ServicePermissions). Several pipelines share one NATS account: each has its own
// assets.Space, named after it (streams CAIRN_<NAME>_*, buckets cairn-<name>-*, subjects
// under cairn.<name>.), so their durables, run ids and keys never meet.
package app
