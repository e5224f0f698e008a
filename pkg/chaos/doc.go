// Package chaos crashes a pipeline hosted on Cairn (package app) at every step boundary and
// at sampled effects, restarts it, and compares each run with an uninterrupted one by what
// its outside systems hold: `cairn chaos --pipeline P`.
//
// The pipeline's binary is what is tested, as it is deployed. Besides the commands of a
// hosted pipeline (`BIN init` makes its assets and keys, `BIN service` runs every service;
// both reach NATS at CAIRN_NATS_URL, and the service crashes at the points CAIRN_FAULTS
// names, package faults), it has one command for chaos:
//
//	BIN chaos-sandbox DIR
//
// It starts the pipeline's outside systems for one run, fresh, keeping their state under
// DIR, and prints one line of JSON (Hello): the environment its services need to reach
// those systems, the run's input, and the URL where the systems' effects are read (GET: an
// Effects). It serves until its standard input closes. ServeSandbox does all of this for a
// Sandbox; the sandbox is the pipeline's, since only the pipeline knows its systems.
//
// Run drives the trials. Each has a folder of its own, a nats-server embedded in the
// driver's process and a fresh sandbox. The reference runs uninterrupted. Then each crash
// point (Points) runs once with CAIRN_FAULTS=<point>=exit@once: the service process exits
// there (code 3, as a kill -9 would leave it), the driver starts it again without the fault
// (as systemd or Kubernetes would), and the run goes on to its end. A trial equals the
// reference when the run ends done and the systems hold the same effects, each as often:
// a repeat is a duplicate. Calls the systems answered beyond the reference's are reported
// (work a crash made them do again), not counted as differences: a crash may cost a call
// that was in flight, whose answer never arrived.
//
// The report (Report, written as report.json in the chaos folder) is what `cairn faultmap
// --pipeline P` shows at each step as the result of the last chaos run.
package chaos
