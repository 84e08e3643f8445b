"""The real template deployed to the embedded local AWS; one LocalStack, one `sam build` and one `sam package`
per session, one stack (its own environment name, so its own buckets, queue and clean database) per test,
stopped at the test's end and not deleted (the session's LocalStack goes away with all of them)."""

import itertools
import os
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[3]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from localaws import replication, sam_app  # noqa: E402
from localaws.pipeline_run import LocalPipeline, RunSettings  # noqa: E402
from localaws.stack import StackConfig, running_stack  # noqa: E402

_numbers = itertools.count(1)

# Small and fast: files every second, scale 0.05 (≈ 1k web_sales rows).
TEST_SCALE = 0.05


@pytest.fixture(scope="session")
def pipeline_endpoint() -> Iterator[str]:
    if not sam_app.TEMPLATE.exists():
        pytest.skip("template.yaml is not in the tree yet")
    with running_stack() as endpoint:
        yield endpoint


@pytest.fixture(scope="session")
def sam_built(pipeline_endpoint: str) -> bool:
    """`sam build`, once per run: under pytest-xdist the workers share one build folder
    (LOCALAWS_SAM_BUILD_DIR, tests/conftest.py) and the first to get its lock builds it (`build_once`)."""
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run is None:
        sam_app.build(pipeline_endpoint)
    else:
        sam_app.build_once(pipeline_endpoint, run)
    return True


@pytest.fixture(scope="session")
def sam_packaged(pipeline_endpoint: str, sam_built: bool, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The build packaged once into this session's local AWS (`sam package`): every test's stack deploys it
    without zipping and uploading the functions again."""
    return sam_app.package(pipeline_endpoint, tmp_path_factory.mktemp("sam") / "packaged.yaml")


# The loop starts no refine run unless a test asks for one (`refine=True`): the refined zone is what the rollover
# test checks end to end; elsewhere each refine was minutes of the suite's CPU for nothing the test asserts (an
# incremental refresh of the example models over the test's tables: ≈ 25 CPU-s of the local Glue's JVM).
REFINE_OFF = {"HasRefineModels": "false"}


@pytest.fixture
def make_pipeline(
    pipeline_endpoint: str, sam_packaged: Path, tmp_path: Path
) -> Iterator[Callable[..., LocalPipeline]]:
    """Factory: a deployed `LocalPipeline` (not deployed with `deploy=False`) with a new environment name and no
    refine runs unless `refine`; closed at the end of the test."""
    made: list[LocalPipeline] = []

    def make(
        parameters: dict[str, str] | None = None,
        scale: float = TEST_SCALE,
        refine: bool = False,
        deploy: bool = True,
        **replication_knobs,
    ):
        name = f"it{next(_numbers)}{uuid.uuid4().hex[:4]}"
        settings = RunSettings(
            name=name,
            scale=scale,
            workdir=tmp_path / name,
            parameters={**REFINE_OFF, **(parameters or {})} if not refine else dict(parameters or {}),
            replication=replication.ReplicationSettings(
                bucket="(set at deploy)",
                cdc_max_batch_interval_seconds=1,
                poll_seconds=0.3,
                **replication_knobs,
            ),
        )
        pipeline = LocalPipeline(pipeline_endpoint, settings, StackConfig())
        made.append(pipeline)
        pipeline.create_source()
        if deploy:  # else the test deploys it itself (`pipeline.release`: as a user does)
            pipeline.deploy(build=False, template=sam_packaged)
        return pipeline

    yield make
    for pipeline in made:
        # Its executions, DMS task and PostgreSQL stopped; its stack left as it is (names of its own: the next
        # test's stack never meets it; what is left of it runs is the watchdog Lambda, once every 5 minutes).
        # Deleting it cost the local AWS's CPU while the next test ran (≈ 40 s a stack on a loaded machine), and
        # a deletion still going when the session's LocalStack stopped held its stop to the 20 s SIGKILL (the
        # module's last teardown: 21 s, 2026-11-26).
        pipeline.close()
