"""The demo's rehearsal of a failure that a replay fixes (docs/console.md, "A rehearsal"):
a dependency an operator switches down and back up (``DemoDependency``, each switch an
operator action) and the ``demo`` integration, the research one behind that dependency: while
the dependency is down, its events fail, retry and are dead-lettered (their attempts
exhausted); once it is back, a replay processes them. ``demo_setup`` creates the dependency
and a source that uses the integration; the integration is registered in the local and test
settings only."""
