"""DS-1000-style Pytorch and Tensorflow problems (written for these tests, in the dataset's jsonl format)
through the real checker: references pass, wrong answers fail, dtypes and layouts are judged where the
problem's own check judges them."""

import pytest

from recreate.domains.ds1000.domain import LIBRARY_EMPTY_ANSWERS, empty_answer
from tests.domains.ds1000.problems import TEST_EXECUTION, ds1000_domain, task_of

# DS-1000-style problems (written for these tests), in the dataset's jsonl format
STACK = '''
import torch
import copy


def generate_test_case(test_case_id):
    def define_test_input(test_case_id):
        torch.random.manual_seed(7)
        if test_case_id == 1:
            list_of_tensors = [torch.randn(3), torch.randn(3), torch.randn(3)]
        elif test_case_id == 2:
            list_of_tensors = [torch.randn(2, 2) for _ in range(4)]
        return list_of_tensors

    def generate_ans(data):
        return torch.stack(data)

    test_input = define_test_input(test_case_id)
    expected_result = generate_ans(copy.deepcopy(test_input))
    return test_input, expected_result


def exec_test(result, ans):
    torch.testing.assert_close(result, ans)
    assert result.type() == ans.type()
    return 1


exec_context = r"""
import torch
list_of_tensors = test_input
[insert]
"""
'''
GATHER = '''
import torch
import copy


def generate_test_case(test_case_id):
    def define_test_input(test_case_id):
        if test_case_id == 1:
            scores = torch.arange(12).reshape(3, 4) * 10
            ids = torch.LongTensor([3, 0, 2])
        elif test_case_id == 2:
            scores = torch.arange(10).reshape(5, 2) - 4
            ids = torch.LongTensor([1, 1, 0, 1, 0])
        return scores, ids

    def generate_ans(data):
        scores, ids = data
        return scores.gather(1, ids.unsqueeze(1)).squeeze(1)

    test_input = define_test_input(test_case_id)
    expected_result = generate_ans(copy.deepcopy(test_input))
    return test_input, expected_result


def exec_test(result, ans):
    try:
        assert torch.equal(result, ans)
        return 1
    except:
        return 0


exec_context = r"""
import torch
scores, ids = test_input
[insert]
"""
'''
ONE_HOT = '''
import tensorflow as tf
import copy


def generate_test_case(test_case_id):
    def define_test_input(test_case_id):
        if test_case_id == 1:
            labels = [0, 6, 5, 4, 2]
        elif test_case_id == 2:
            labels = [9, 0]
        return labels

    def generate_ans(data):
        return tf.one_hot(indices=data, depth=10, on_value=1, off_value=0, axis=-1)

    test_input = define_test_input(test_case_id)
    expected_result = generate_ans(copy.deepcopy(test_input))
    return test_input, expected_result


def exec_test(result, ans):
    assert result.dtype == ans.dtype and result.shape == ans.shape
    assert tf.reduce_all(result == ans)
    return 1


exec_context = r"""
import tensorflow as tf
labels = test_input
[insert]
"""
'''
ROW_SUMS = '''
import tensorflow as tf
import numpy as np
import copy


def generate_test_case(test_case_id):
    def define_test_input(test_case_id):
        if test_case_id == 1:
            x = tf.constant([[1, 2, 3], [4, 5, 6]])
        elif test_case_id == 2:
            x = tf.constant([[0.5, -1.0], [2.0, 2.0], [1.0, 0.0]])
        return x

    def generate_ans(data):
        return tf.reduce_sum(data, axis=1)

    test_input = define_test_input(test_case_id)
    expected_result = generate_ans(copy.deepcopy(test_input))
    return test_input, expected_result


def exec_test(result, ans):
    np.testing.assert_array_equal(result, ans)
    return 1


exec_context = r"""
import tensorflow as tf
x = test_input
def f(x):
[insert]
result = f(x)
"""
'''
CONTIGUOUS = '''
import torch
import copy


def generate_test_case(test_case_id):
    def define_test_input(test_case_id):
        if test_case_id == 1:
            x = torch.arange(6.0).reshape(2, 3)
        elif test_case_id == 2:
            x = torch.arange(12).reshape(3, 4)
        return x

    def generate_ans(data):
        return data.t().contiguous()

    test_input = define_test_input(test_case_id)
    expected_result = generate_ans(copy.deepcopy(test_input))
    return test_input, expected_result


def exec_test(result, ans):
    try:
        assert result.is_contiguous()
        assert torch.equal(result, ans)
        return 1
    except:
        return 0


exec_context = r"""
import torch
x = test_input
[insert]
"""
'''
TOPK = '''
import torch
import copy


def generate_test_case(test_case_id):
    def define_test_input(test_case_id):
        torch.manual_seed(7)
        if test_case_id == 1:
            x = torch.tensor([[5.0, 1.0, 4.0, 2.0], [0.0, 3.0, 9.0, 7.0]])
        elif test_case_id == 2:
            x = torch.randn(5, 8)
        return x

    def generate_ans(data):
        return torch.topk(data, 3, dim=1)

    test_input = define_test_input(test_case_id)
    expected_result = generate_ans(copy.deepcopy(test_input))
    return test_input, expected_result


def exec_test(result, ans):
    try:
        assert type(result) == type(ans)
        assert torch.equal(result.values, ans.values)
        assert torch.equal(result.indices, ans.indices)
        return 1
    except:
        return 0


exec_context = r"""
import torch
x = test_input
[insert]
"""
'''
ROW_MAX = '''
import torch


def generate_test_case(test_case_id):
    torch.random.manual_seed(test_case_id)
    x = torch.randint(0, 50, (4, 5))
    return x, x.max(dim=1).values


def exec_test(result, ans):
    assert bool((result == ans).all())  # a result of size 0 broadcasts: the checker's guard fails it
    return 1


exec_context = r"""
import torch
x = test_input
[insert]
"""
'''
PROBLEMS = {  # problem id: (library, code_context, reference_code)
    1: ("Pytorch", STACK, "result = torch.stack(list_of_tensors)"),
    2: ("Pytorch", GATHER, "result = scores.gather(1, ids.unsqueeze(1)).squeeze(1)"),
    3: ("Tensorflow", ONE_HOT, "result = tf.one_hot(labels, depth=10, dtype=tf.int32)"),
    4: ("Tensorflow", ROW_SUMS, "    return tf.reduce_sum(x, axis=1)"),
    5: ("Pytorch", CONTIGUOUS, "result = x.t().contiguous()"),  # the strides cross: x.t() is no answer
    6: ("Pytorch", TOPK, "result = torch.topk(x, 3, dim=1)"),  # torch.return_types.topk comes back as one
    7: ("Pytorch", ROW_MAX, "result = x.max(dim=1).values"),
}


@pytest.fixture(scope="module")
def tensor_domain(torch_env, tf_env, tmp_path_factory):
    rows = []
    for problem_id, (library, context, reference) in PROBLEMS.items():
        metadata = {"problem_id": problem_id, "library_problem_id": problem_id - 1, "library": library}
        metadata |= {"test_case_cnt": 2, "perturbation_type": "Origin", "perturbation_origin_id": problem_id}
        context += TEST_EXECUTION
        rows.append({"prompt": f"problem {problem_id}", "reference_code": reference, "metadata": metadata})
        rows[-1]["code_context"] = context
    yield from ds1000_domain(rows, torch_env, tmp_path_factory.mktemp("tensors"), timeout=120)


@pytest.mark.slow
@pytest.mark.bwrap
def test_tensor_problems_references_pass_and_wrong_answers_fail(tensor_domain, bwrap):
    for problem_id in PROBLEMS:
        task = task_of(tensor_domain, problem_id)
        evaluation = tensor_domain.evaluate(task, task.reference, bwrap)
        assert evaluation.passed, (problem_id, evaluation.feedback)
    wrong = {
        1: "result = torch.cat(list_of_tensors)",
        2: "result = scores[:, 0]",
        3: "result = tf.one_hot(labels, depth=9, dtype=tf.int32)",
        4: "    return tf.reduce_sum(x, axis=0)",
        5: "result = x.t()",  # the right values, not contiguous
        6: "import collections\nresult = collections.namedtuple('topk', 'values indices')(*x.topk(3, 1))",
    }
    for problem_id, solution in wrong.items():
        evaluation = tensor_domain.evaluate(task_of(tensor_domain, problem_id), solution, bwrap)
        assert not evaluation.passed and evaluation.score == 0.0, (problem_id, evaluation.feedback)
        assert "expected (test case 1):" in evaluation.feedback and "got: " in evaluation.feedback
    feedback = tensor_domain.evaluate(task_of(tensor_domain, 2), wrong[2], bwrap).feedback
    assert "got: tensor([ 0, 40, 80])" in feedback and "tensor([ 30,  40, 100])" in feedback, feedback


@pytest.mark.slow
@pytest.mark.bwrap
def test_tensor_problems_judge_the_dtype_where_the_check_does(tensor_domain, bwrap):
    def evaluate(problem_id, solution):
        return tensor_domain.evaluate(task_of(tensor_domain, problem_id), solution, bwrap)

    as_float64 = evaluate(1, "result = torch.stack(list_of_tensors).double()")
    assert not as_float64.passed and "dtype" in as_float64.feedback, as_float64.feedback
    as_float32 = evaluate(3, "result = tf.one_hot(labels, depth=10)")
    assert not as_float32.passed and "result.dtype == ans.dtype" in as_float32.feedback, as_float32.feedback
    # torch.equal and np.testing.assert_array_equal compare values only, in DS-1000 as here
    assert evaluate(2, "result = scores.gather(1, ids.unsqueeze(1)).squeeze(1).double()").passed
    assert evaluate(4, "    return tf.cast(tf.reduce_sum(x, axis=1), tf.float64)").passed
    as_variable = evaluate(3, "result = tf.Variable(tf.one_hot(labels, depth=10, dtype=tf.int32))")
    assert as_variable.passed, as_variable.feedback
    as_param = evaluate(1, "result = torch.nn.Parameter(torch.stack(list_of_tensors))")
    assert as_param.passed, as_param.feedback  # assert_close takes subclasses, as it would in DS-1000


@pytest.mark.slow
@pytest.mark.bwrap
def test_the_selftests_empty_tensors_fail_every_tensor_problem(tensor_domain, bwrap):
    for problem_id, (library, _, reference) in PROBLEMS.items():
        answers = LIBRARY_EMPTY_ANSWERS[library]
        body = reference.startswith("    ")
        for kind in range(len(answers)):
            empty = tensor_domain.evaluate(
                task_of(tensor_domain, problem_id), empty_answer(kind, body, answers), bwrap
            )
            assert not empty.passed, (problem_id, answers[kind], empty.feedback)
    broadcast = tensor_domain.evaluate(task_of(tensor_domain, 7), "result = torch.tensor([])", bwrap)
    assert "result is empty where the expected answer is not" in broadcast.feedback, broadcast.feedback
    assert any("torch" in empty for empty in tensor_domain.wrong_submissions(task_of(tensor_domain, 7)))
