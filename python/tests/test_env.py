# SPDX-License-Identifier: BSD-2-Clause
"""The CUDA settings `import gpunvme` puts in the environment
(python/src/gpunvme/__init__.py): module loading lazy when the emulator's
copies go to its DMA process (the module's default), eager when they stay
in the process (GPUNVME_EMU_DMA=inproc), 32 hardware queues, and a value
the user chose kept, with a warning where it is the one that can stall a
read. Each case imports the module in a fresh interpreter: the settings are
taken at import, before any CUDA use."""
import os
import subprocess
import sys

import pytest

_KEYS = ("CUDA_MODULE_LOADING", "CUDA_DEVICE_MAX_CONNECTIONS", "GPUNVME_EMU_DMA")


def _imported(**env_set):
    """import gpunvme with env_set on top of this environment less _KEYS;
    -> (os.environ's CUDA_MODULE_LOADING, CUDA_DEVICE_MAX_CONNECTIONS as a
    program started after the import sees them, the warnings' text)"""
    env = {k: v for k, v in os.environ.items() if k not in _KEYS}
    env.update(env_set)
    code = ("import os, subprocess, warnings\n"
            "warnings.simplefilter('always')\n"
            "import gpunvme\n"
            "print(os.environ['CUDA_MODULE_LOADING'])\n"
            "print(subprocess.run(['sh', '-c', 'echo $CUDA_MODULE_LOADING $CUDA_DEVICE_MAX_CONNECTIONS'],"
            " capture_output=True, text=True).stdout.strip())\n")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd="/", timeout=120)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.split("\n")
    child = lines[1].split()
    assert child[0] == lines[0], "os.environ and the process environment differ: %r" % lines
    return lines[0], child[1], r.stderr


def test_lazy_with_the_dma_process():
    ml, conn, err = _imported()
    assert (ml, conn) == ("LAZY", "32")
    assert "CUDA_MODULE_LOADING" not in err


def test_eager_in_process():
    ml, conn, err = _imported(GPUNVME_EMU_DMA="inproc")
    assert (ml, conn) == ("EAGER", "32")
    assert "CUDA_MODULE_LOADING" not in err


def test_explicit_process_is_lazy():
    ml, _, _ = _imported(GPUNVME_EMU_DMA="process")
    assert ml == "LAZY"


@pytest.mark.parametrize("value", ["EAGER", "LAZY"])
def test_user_value_kept_with_the_dma_process(value):
    """the user's choice wins and is not warned about: neither stalls the
    DMA process's copies"""
    ml, _, err = _imported(CUDA_MODULE_LOADING=value)
    assert ml == value
    assert "CUDA_MODULE_LOADING" not in err


def test_lazy_in_process_kept_with_a_warning():
    """in process, lazy loading can stall a read: kept, and the warning
    names the setting and the way out"""
    ml, _, err = _imported(GPUNVME_EMU_DMA="inproc", CUDA_MODULE_LOADING="LAZY")
    assert ml == "LAZY"
    assert "CUDA_MODULE_LOADING=LAZY with GPUNVME_EMU_DMA=inproc" in err and "use EAGER" in err, err


def test_user_connections_kept():
    env = {"CUDA_DEVICE_MAX_CONNECTIONS": "8"}
    _, conn, _ = _imported(**env)
    assert conn == "8"
