package service

import "github.com/cairnhq/cairn/pkg/runner"

// version is the code version a build names for itself, for a build without its VCS
// directory (deploy/Dockerfile): go build -ldflags "-X github.com/cairnhq/cairn/internal/service.version=v1.4.0".
// Empty, the build's own record says (runner.BuildVersion).
var version string

// CodeVersion is the version of this build's code, as every step records it (versions.code).
func CodeVersion() string {
	if version != "" {
		return version
	}
	return runner.BuildVersion()
}
