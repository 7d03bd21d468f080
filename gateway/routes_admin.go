package gateway

import (
	"errors"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/gateway/api"
)

// sandboxes is GET /v1/sandboxes.
func (s adminRoutes) sandboxes(c echo.Context) error {
	if err := checkQuery(c); err != nil {
		return err
	}
	list, err := s.d.Sandboxes.Sandboxes(c.Request().Context())
	if err != nil {
		return dockerUnavailable(err)
	}
	if list == nil {
		list = []sandgate.Sandbox{}
	}
	return c.JSON(http.StatusOK, api.SandboxList{Sandboxes: list})
}

// sandboxCleanup is POST /v1/sandboxes/cleanup.
func (s adminRoutes) sandboxCleanup(c echo.Context) error {
	if err := checkQuery(c); err != nil {
		return err
	}
	removed, err := s.d.Sandboxes.CleanupOrphans(c.Request().Context())
	if err != nil {
		return dockerUnavailable(err)
	}
	if removed == nil {
		removed = []sandgate.Sandbox{}
	}
	s.logger(c).Info("orphans cleaned up", "count", len(removed), "actor", principal(c).Name)
	return c.JSON(http.StatusOK, api.CleanupResult{Removed: removed, Count: len(removed)})
}

// volumes is GET /v1/volumes: every team's cache volumes.
func (s adminRoutes) volumes(c echo.Context) error {
	if err := checkQuery(c); err != nil {
		return err
	}
	if s.d.Volumes == nil {
		return sandgate.Errorf(sandgate.CodeNotFound, "this gateway keeps no cache volumes")
	}
	list, err := s.d.Volumes.CacheVolumes(c.Request().Context())
	if err != nil {
		return err
	}
	if list == nil {
		list = []sandgate.CacheVolume{}
	}
	return c.JSON(http.StatusOK, api.VolumeList{Volumes: list})
}

// removeVolume is DELETE /v1/volumes/{team}/{name}: an admin empties a
// team's cache volume (one past its quota, or poisoned) by removing it;
// the team's next run that names it starts from an empty one.
func (s adminRoutes) removeVolume(c echo.Context) error {
	if err := checkQuery(c); err != nil {
		return err
	}
	if s.d.Volumes == nil {
		return sandgate.Errorf(sandgate.CodeNotFound, "this gateway keeps no cache volumes")
	}
	team, name := c.Param("team"), c.Param("name")
	p := principal(c)
	if err := s.d.Volumes.RemoveCacheVolume(c.Request().Context(), team, name); err != nil {
		return err
	}
	subject := sandgate.PrincipalSubject(p, correlationID(c), s.cfg.Node)
	subject.Team = team
	s.d.Recorder.Emit(sandgate.NewVolumeRemoved(subject, s.d.Clock(), map[string]any{"volume": name}))
	s.logger(c).Info("cache volume removed", "team", team, "volume", name, "actor", p.Name)
	return c.NoContent(http.StatusNoContent)
}

func dockerUnavailable(err error) error {
	var se *sandgate.Error
	if errors.As(err, &se) {
		return err
	}
	return sandgate.WrapError(sandgate.CodeDockerUnavailable, err, "the Docker daemon is unavailable")
}
