"""ppsolve plot: real PNG/SVG/PDF files of the requested size, and readable layouts."""

from __future__ import annotations

import struct
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.plot.helpers import one_f_one_b_orders, serial_schedule, tiny_problem  # noqa: E402

from ppsolve.checker import check
from ppsolve.cli import main
from ppsolve.plot.gantt import has_transfer_lanes, layout, title_lines
from ppsolve.schedule import make_schedule
from ppsolve.simulator import simulate

OFFLOAD = {"fraction": 0.8, "bandwidth": {"d2h": 1, "h2d": 1}}


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


@pytest.fixture
def schedule_file(tmp_path):
    problem = tiny_problem(3, 4, capacity=2.5, offload=OFFLOAD, chunks=2, placement="vshape")
    schedule = serial_schedule(problem, offload=True)
    assert check(schedule).ok
    path = tmp_path / "schedule.json"
    schedule.save(path)
    return path


def test_png_has_requested_size(schedule_file, tmp_path):
    out = tmp_path / "gantt.png"
    assert main(["plot", str(schedule_file), "-o", str(out), "--size", "9x6", "--dpi", "80"]) == 0
    assert png_size(out) == (720, 480)


def test_default_png_size_follows_the_layout(schedule_file, tmp_path):
    from ppsolve.schedule import load_schedule

    out = tmp_path / "gantt.png"
    assert main(["plot", str(schedule_file), "-o", str(out)]) == 0
    lay = layout(load_schedule(schedule_file))
    width, height = png_size(out)
    assert abs(width - lay.width * 100) <= 1 and abs(height - lay.height * 100) <= 1


def test_svg_is_xml_with_op_labels(schedule_file, tmp_path):
    out = tmp_path / "gantt.svg"
    assert main(["plot", str(schedule_file), "-o", str(out), "--size", "10x7"]) == 0
    root = ET.parse(out).getroot()
    assert root.tag.endswith("svg")
    assert root.attrib["width"].startswith("720")  # 10 in at 72 pt per inch
    assert root.attrib["height"].startswith("504")


def test_pdf_is_a_pdf(schedule_file, tmp_path):
    out = tmp_path / "gantt.pdf"
    assert main(["plot", str(schedule_file), "-o", str(out)]) == 0
    data = out.read_bytes()
    assert data.startswith(b"%PDF-") and data.rstrip().endswith(b"%%EOF")


def test_bad_extension_is_one_clear_error(schedule_file, tmp_path, capsys):
    assert main(["plot", str(schedule_file), "-o", str(tmp_path / "gantt.jpg")]) == 2
    err = capsys.readouterr().err
    assert "--output" in err and ".png" in err and "Traceback" not in err
    assert not (tmp_path / "gantt.jpg").exists()


def test_bad_size_is_one_clear_error(schedule_file, tmp_path, capsys):
    assert main(["plot", str(schedule_file), "-o", str(tmp_path / "g.png"), "--size", "big"]) == 2
    assert "--size" in capsys.readouterr().err


def test_lanes_only_when_offloading():
    plain = serial_schedule(tiny_problem(2, 2))
    with_link = serial_schedule(tiny_problem(2, 2, capacity=2, offload=OFFLOAD), offload=True)
    assert not has_transfer_lanes(plain)
    assert has_transfer_lanes(with_link)
    assert layout(with_link).height > layout(plain).height


def test_8x32_is_readable_and_bounded():
    problem = tiny_problem(8, 32)
    schedule = make_schedule(problem, simulate(problem, one_f_one_b_orders(problem)), "1f1b-test")
    lay = layout(schedule)
    # the shortest op gets at least ~0.1 inch (room for a two-digit label) unless the width cap is hit
    shortest = min(op.duration for op in schedule.ops)
    assert (lay.width - 1.95) * shortest / schedule.makespan >= 0.1 or lay.width == 32.0
    assert 8 <= lay.width <= 32 and lay.height < 14
    head, sub = title_lines(schedule)
    assert "makespan 188" in head and "peak memory 8" in head and "bubble" in head and "gap" in head
    assert "8 devices" in sub and "32 microbatches" in sub


def test_large_problem_gets_a_capped_figure():
    problem = tiny_problem(24, 48)
    schedule = make_schedule(problem, simulate(problem, one_f_one_b_orders(problem)), "1f1b-test")
    lay = layout(schedule)
    assert lay.width <= 32 and lay.memory_panels == 1 and lay.height < 20


def test_units_come_from_the_x_units_annotation():
    problem = tiny_problem(2, 2)
    assert problem.units == ("problem's time unit", "problem's memory unit")
    data = problem.to_dict()
    data["x-units"] = {"time": "ms", "memory": "GiB"}
    from ppsolve.problem import problem_from_dict

    assert problem_from_dict(data).units == ("ms", "GiB")
    data["x-units"] = "ms"
    data["x-profile"] = 3
    assert problem_from_dict(data).units == ("problem's time unit", "problem's memory unit")


def test_transfer_lanes_only_for_devices_that_transfer():
    from ppsolve.plot.gantt import transfer_devices

    problem = tiny_problem(3, 2, capacity=3, offload=OFFLOAD)
    orders = serial_schedule(problem, offload=True)
    moving = {op.device for op in orders.ops if op.kind.is_transfer}
    assert transfer_devices(orders) == tuple(sorted(moving))
    idle = serial_schedule(problem)  # can offload, moves nothing: no lanes
    assert transfer_devices(idle) == () and not layout(idle).lanes


def test_long_titles_wrap_to_the_figure_width():
    from ppsolve.plot.gantt import CHAR_EM, HEAD_FONT, LEFT, SUB_FONT

    problem = tiny_problem(2, 2)
    data = problem.to_dict()
    data["name"] = "a problem with a very long name " * 6
    from ppsolve.problem import problem_from_dict

    schedule = serial_schedule(problem_from_dict(data))
    lay = layout(schedule, size=(8, 6))
    head, sub = lay.title
    assert len(sub) > 1
    room = (8 - LEFT) * 72
    assert all(len(line) * HEAD_FONT * CHAR_EM <= room for line in head)
    assert all(len(line) * SUB_FONT * CHAR_EM <= room for line in sub)


def test_over_capacity_peak_is_marked(tmp_path):
    from ppsolve.plot.gantt import CAPACITY_COLOR, draw_gantt

    problem = tiny_problem(2, 3, capacity=1)
    schedule = make_schedule(problem, simulate(problem, one_f_one_b_orders(problem)), "1f1b-test")
    assert max(schedule.peak_memory) > 1
    fig = draw_gantt(schedule)
    notes = [t for ax in fig.axes for t in ax.texts if "> cap" in t.get_text()]
    assert notes and all(t.get_color() == CAPACITY_COLOR for t in notes)


def test_a_long_uneven_schedule_wraps_over_rows(tmp_path):
    from ppsolve.plot.gantt import MAX_SEGMENTS, WRAP_WIDTH, draw_gantt
    from ppsolve.problem import problem_from_dict

    problem = problem_from_dict({"format": "ppsolve/problem@1", "devices": 4, "microbatches": 24,
                                 "time": {"forward": [0.2, 4, 4, 9], "backward_input": [0.2, 4, 4, 10],
                                          "backward_weight": [0.1, 3, 3, 8]}, "memory": {"activation": 1}})
    schedule = make_schedule(problem, simulate(problem, one_f_one_b_orders(problem)), "1f1b-test")
    lay = layout(schedule)
    assert 1 < lay.segments <= MAX_SEGMENTS and lay.width == WRAP_WIDTH
    fig = draw_gantt(schedule)
    rows = [ax for ax in fig.axes if ax.get_ylim()[0] > ax.get_ylim()[1]]  # the lanes (y grows downwards)
    assert len(rows) == lay.segments
    assert rows[0].get_xlim()[0] == 0 and abs(rows[-1].get_xlim()[1] - schedule.makespan) < 1e-9
