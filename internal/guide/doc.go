// Package guide holds the tests of the pages a newcomer follows: docs/guide.md, followed
// from an empty module to a job killed and resumed (TestGuide), and the README, kept to its
// size (TestReadmeSize).
//
// # How the guide marks what the test runs
//
// A fenced block whose info string names a file after its language (```go file=job.go,
// ```text file=go.mod) is that file of the reader's module, word for word; the test writes
// each into a new folder under t.TempDir, outside the repository. The one change it makes is
// the checkout's path: the page puts Cairn at ../cairn, the test at the repository's root,
// in go.mod's replace and in every command.
//
// In every other block, a line that starts with "$ " is a command, and the lines after it,
// up to the next command, are its output as the page shows it. The test's script (script in
// guide_test.go) lists every command of the page in the page's order with what the test does
// for it: run it as it stands (sh -c, in the module's folder), start it in the background
// (a trailing &), signal the background process (kill), set a variable for the commands
// after it (export), or look by an equivalent (sqlite3, which a machine may lack, is a query
// through the project's driver). The test fails when the page and the script disagree, so a
// command changed on the page is a command changed in the test. Each line of output the page
// shows must be a line of what the command printed, once the parts that change from run to
// run are masked (ports, times, durations, lease owners, digests); a line "…" stands for
// lines left out, and a line ending in "…" for its start.
//
// The module is tidied with Cairn's go.sum copied in first, as the page says, and with the
// test's own GOPROXY, GOMODCACHE and GOFLAGS: offline, a warm module cache (the repository's
// own build) is enough.
package guide
