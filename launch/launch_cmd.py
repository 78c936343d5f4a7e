"""``autoaug launch``: run an ``autoaug`` command on a Ray cluster as a Ray Job.

::

    autoaug launch --address http://HEAD:8265 [--no-wait] [--working-dir DIR] [--env K=V ...] \\
        -- search --preset cpu --data s3://bucket/cifar10/ --storage s3://bucket/runs --store s3://bucket/policies
    autoaug launch status JOB_ID --address http://HEAD:8265
    autoaug launch logs   JOB_ID --address http://HEAD:8265 [--follow]
    autoaug launch stop   JOB_ID --address http://HEAD:8265
    autoaug launch list          --address http://HEAD:8265

The command after ``--`` is submitted through ``ray.job_submission.JobSubmissionClient`` with the
entrypoint ``python -m autoaug.launch.cli COMMAND ARGS...``. Its ``runtime_env`` carries the project's
four packages (``py_modules``, see :func:`autoaug.core.ray_session.project_runtime_env`), the variables
given with ``--env``, and a working directory: ``--working-dir DIR`` if given, else a small
folder holding copies of the local files the command names (a ``--config`` YAML, a policy
JSON). Paths are rewritten so the job finds them:

* a local file of at most 1 MiB (configs, policies) is shipped and its argument rewritten to the
  shipped copy;
* any other local path (a dataset, a run directory, a policy store, a path that does not exist
  yet) is made absolute, with a note that the cluster's nodes must see it at that location
  (a shared filesystem); give URIs (``s3://...``) when they do not.

``--keep-paths`` turns the rewriting off. The job's logs are streamed until it ends, and the exit
status is the job's: 0 when it succeeded, 1 when it failed or was stopped. ``--no-wait`` prints
the job id and returns at once. The address defaults to ``$RAY_API_SERVER_ADDRESS`` (or an
``http://`` ``$RAY_ADDRESS``); clusters with token authentication need ``RAY_AUTH_MODE=token``
and ``RAY_AUTH_TOKEN`` in the environment (docs/cluster.md).
"""

from __future__ import annotations

import argparse

__all__ = ["register", "run"]

#: Checked by ``autoaug``'s main before the command runs (the search extra, autoaug.core.extras).
REQUIRES = ("ray",)


def run(args: argparse.Namespace) -> int:
    """Entry point of ``autoaug launch`` (:mod:`autoaug.launch.launch_run`)."""
    from autoaug.launch import launch_run  # submitting and following Ray Jobs: not for the parser

    return launch_run.run(args)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``autoaug launch``."""
    parser = subparsers.add_parser(
        "launch",
        help="run an autoaug command on a Ray cluster as a Ray Job; status/logs/stop/list jobs",
        description=(
            "Submit `autoaug COMMAND ARGS...` to a Ray cluster as a Ray Job (the project's packages "
            "are shipped in its runtime_env), stream its logs and exit with its status; or act on a "
            "submitted job: `autoaug launch status|logs|stop JOB_ID`, `autoaug launch list`."
        ),
        usage=(
            "autoaug launch [--address URL] [--no-wait] [--working-dir DIR] [--env K=V ...] -- COMMAND [ARGS...]\n"
            "       autoaug launch {status,logs,stop} JOB_ID [--address URL]\n"
            "       autoaug launch list [--address URL]"
        ),
        epilog=(
            "Token-authenticated clusters (the default for `ray start`) need RAY_AUTH_MODE=token and "
            "RAY_AUTH_TOKEN in the environment. See docs/cluster.md."
        ),
    )
    parser.add_argument(
        "--address",
        default=None,
        metavar="URL",
        help="the Ray job server, i.e. the head's dashboard, http://HEAD:8265 (default: "
        "$RAY_API_SERVER_ADDRESS, or an http:// $RAY_ADDRESS)",
    )
    parser.add_argument("--no-wait", action="store_true", help="print the job id and return after submitting")
    parser.add_argument(
        "--working-dir",
        default=None,
        metavar="DIR",
        help="folder uploaded as the job's working directory (default: only the small local files the "
        "command names are shipped)",
    )
    parser.add_argument("--env", action="append", metavar="K=V", help="environment variable for the job (repeatable)")
    parser.add_argument("--job-id", default=None, help="submission id (default: autoaug-COMMAND-TIME-RANDOM)")
    parser.add_argument(
        "--python",
        default="python",
        metavar="EXE",
        help="Python executable on the cluster that runs `-m autoaug.launch.cli` (default: python)",
    )
    parser.add_argument(
        "--entrypoint-num-cpus",
        type=float,
        default=None,
        metavar="N",
        help="CPUs reserved for the job's driver process (default 0)",
    )
    parser.add_argument(
        "--keep-paths",
        action="store_true",
        help="pass the command's arguments unchanged (no shipping or absolutising of local paths)",
    )
    parser.add_argument(
        "command",
        nargs=argparse.REMAINDER,
        metavar="-- COMMAND ARGS",
        help="the autoaug command to run on the cluster, e.g. -- search --preset smoke --data /data/train.parquet",
    )
    parser.set_defaults(func=run)
