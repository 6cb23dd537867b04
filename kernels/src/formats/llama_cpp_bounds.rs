//! test-quantize-fns.cpp's checks, which llama.cpp runs over every type, run here over
//! every format pocket quantizes: its data quantized and decoded again within
//! `MAX_QUANTIZATION_TOTAL_ERROR`, and each weight format's `vec_dot` with its activation
//! format within `MAX_DOT_PRODUCT_ERROR` of the unquantized dot product.

use super::test_util::*;
use super::{q4_0, q4_1, q4_k, q5_0, q5_1, q5_k, q6_k, q8_0};

#[test]
fn every_quantizer_round_trips_within_llama_cpp_bound() {
    Q4_0.assert_round_trip_within_llama_cpp_bound();
    Q4_1.assert_round_trip_within_llama_cpp_bound();
    Q5_0.assert_round_trip_within_llama_cpp_bound();
    Q5_1.assert_round_trip_within_llama_cpp_bound();
    Q8_0.assert_round_trip_within_llama_cpp_bound();
    Q8_1.assert_round_trip_within_llama_cpp_bound();
    Q4_K.assert_round_trip_within_llama_cpp_bound();
    Q5_K.assert_round_trip_within_llama_cpp_bound();
    Q6_K.assert_round_trip_within_llama_cpp_bound();
    Q8_K.assert_round_trip_within_llama_cpp_bound();
}

#[test]
fn every_vec_dot_of_quantized_data_is_within_llama_cpp_bound() {
    assert_vec_dot_within_llama_cpp_bound(&Q4_0, &Q8_0, q4_0::vec_dot, "q4_0");
    assert_vec_dot_within_llama_cpp_bound(&Q4_1, &Q8_1, q4_1::vec_dot, "q4_1");
    assert_vec_dot_within_llama_cpp_bound(&Q5_0, &Q8_0, q5_0::vec_dot, "q5_0");
    assert_vec_dot_within_llama_cpp_bound(&Q5_1, &Q8_1, q5_1::vec_dot, "q5_1");
    assert_vec_dot_within_llama_cpp_bound(&Q8_0, &Q8_0, q8_0::vec_dot, "q8_0");
    assert_vec_dot_within_llama_cpp_bound(&Q4_K, &Q8_K, q4_k::vec_dot, "q4_k");
    assert_vec_dot_within_llama_cpp_bound(&Q5_K, &Q8_K, q5_k::vec_dot, "q5_k");
    assert_vec_dot_within_llama_cpp_bound(&Q6_K, &Q8_K, q6_k::vec_dot, "q6_k");
}
