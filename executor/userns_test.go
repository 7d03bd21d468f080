package executor

import (
	"testing"

	"github.com/docker/docker/api/types/system"
)

// TestShiftOf: a daemon's userns-remap shift, read from its info.
func TestShiftOf(t *testing.T) {
	cases := []struct {
		name    string
		info    system.Info
		want    idShift
		wantErr bool
	}{
		{"no userns", system.Info{SecurityOptions: []string{"name=seccomp,profile=default"}, DockerRootDir: "/var/lib/docker"}, idShift{}, false},
		{"remapped", system.Info{SecurityOptions: []string{"name=seccomp,profile=default", "name=userns"}, DockerRootDir: "/var/lib/docker/231072.231072"}, idShift{231072, 231072}, false},
		{"remapped, gid apart", system.Info{SecurityOptions: []string{"name=userns"}, DockerRootDir: "/srv/d/100000.200000"}, idShift{100000, 200000}, false},
		{"remapped, root unnamed", system.Info{SecurityOptions: []string{"name=userns"}, DockerRootDir: "/var/lib/docker"}, idShift{}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := shiftOf(tc.info)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Fatalf("shiftOf = %+v, %v; want %+v, error %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}
