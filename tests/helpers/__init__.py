"""What the test modules share, one module per topic so that no test module imports another: `common`
(the settings for tests, small graphs, planted payloads, models), `runs` (launch.py and train as a user
runs them), `sampling` (a sampler's statistics), `shm` (a small /dev/shm), `pyg_spec` (PyG's own tests
with conveyor's loaders), `cases` (the hostile sweeps' harness). Every name is also here, so a test
imports `from tests.helpers import ...` whichever topic holds it."""

from tests.helpers.cases import (  # noqa: F401
    Case,
    Expect,
    correct,
    refused,
    run_case,
)
from tests.helpers.common import (  # noqa: F401
    REPO,
    SHADOWED,
    DoubledFeatures,
    EdgeIndexSAGE,
    OwnLayerwise,
    OwnModel,
    Payload,
    chain_graph,
    complete_in_graph,
    feature_graph,
    home_with_planetoid,
    make_config,
    memory_cgroup,
    plant,
    power_law_graph,
    random_graph,
    record_worker,
    skewed_graph,
    star_graph,
    users_project,
    with_isolated,
    write_custom_dataset,
)
from tests.helpers.pyg_spec import (  # noqa: F401
    PYG_LIB_SKIP,
    PYG_TESTS,
    SAMPLER_FLAGS,
    SAMPLER_PACKAGES,
    open_gate,
    pyg_get_dataset,
    pyg_spec_tests,
    with_conveyors,
    with_pipeline,
)
from tests.helpers.runs import (  # noqa: F401
    assert_clear_error,
    assert_gone,
    launch,
    refusal,
    run,
    shm_names,
    tensorboard_losses,
    train_both,
    write_custom,
)
from tests.helpers.sampling import (  # noqa: F401
    BAD_SEEDS,
    BAD_WEIGHTS,
    WEIGHTED_CASES,
    assert_drawn_as,
    assert_edge_positions,
    drawn_subsets,
    fan_rank_counts,
    fused_state_is_clean,
    multigraph,
    neighbour_counts,
    successive_sampling,
    weighted_fans,
)
from tests.helpers.shm import (  # noqa: F401
    SMALL_SHM,
    NoFanouts,
    fill_shm,
    in_small_shm,
    shm_namespaces_allowed,
)
