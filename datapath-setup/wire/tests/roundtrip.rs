use ccp_wire::*;
use proptest::prelude::*;

#[test]
fn priority_message_matches_the_documented_bytes() {
    // The example in docs/wire.md: sid 7 becomes hybrid with a 1.25 MB/s threshold.
    let msg = PriorityMsg {
        sid: 7,
        class: PriorityClass::Hybrid,
        flags: 0,
        hybrid_threshold_bytes_per_sec: 1_250_000,
    };
    let bytes = encode_priority(&msg);
    assert_eq!(
        bytes,
        [
            0x20, 0x00, 0x18, 0x00, 0x07, 0x00, 0x00, 0x00, // type 0x20, len 24, sid 7
            0x02, 0x00, 0x00, 0x00, // priority 2 = hybrid
            0x00, 0x00, 0x00, 0x00, // flags
            0xd0, 0x12, 0x13, 0x00, 0x00, 0x00, 0x00, 0x00, // 1_250_000 bytes/s
        ]
    );
    assert_eq!(decode(&bytes), Ok(DatapathMsg::Priority(msg)));
}

#[test]
fn create_and_ready_and_sync_round_trip() {
    let create = CreateMsg {
        sid: 3,
        init_cwnd: 14480,
        mss: 1448,
        src_ip: 0x0a00_0001,
        src_port: 5201,
        dst_ip: 0x0a00_0002,
        dst_port: 40000,
        cong_alg: Some("ledbat++".into()),
    };
    assert_eq!(
        decode(&encode_create(&create)),
        Ok(DatapathMsg::Create(create))
    );
    assert_eq!(
        decode(&encode_ready(9)),
        Ok(DatapathMsg::Ready { datapath_id: 9 })
    );
    assert_eq!(
        decode(&encode_sync(0, 77)),
        Ok(DatapathMsg::Sync { sid: 0, token: 77 })
    );
}

#[test]
fn empty_measure_is_a_close() {
    match decode(&encode_close(4)) {
        Ok(DatapathMsg::Measure(m)) => assert!(m.is_close() && m.sid == 4),
        other => panic!("expected a close, got {other:?}"),
    }
}

#[test]
fn agent_only_and_unknown_types_are_refused() {
    let mut install = encode_sync(1, 0);
    install[0] = 2;
    assert_eq!(decode(&install), Err(DecodeError::AgentOnlyType(2)));
    install[0] = 3;
    assert_eq!(decode(&install), Err(DecodeError::AgentOnlyType(3)));
    install[0] = 0x7f;
    assert_eq!(decode(&install), Err(DecodeError::UnknownType(0x7f)));
}

#[test]
fn non_utf8_name_is_an_error_not_a_panic() {
    let mut bytes = encode_create(&CreateMsg {
        sid: 1,
        init_cwnd: 0,
        mss: 1448,
        src_ip: 0,
        src_port: 0,
        dst_ip: 0,
        dst_port: 0,
        cong_alg: Some("xx".into()),
    });
    bytes[32] = 0xff;
    assert_eq!(decode(&bytes), Err(DecodeError::NameNotUtf8));
}

#[test]
fn bad_lengths_are_errors() {
    let good = encode_measure(1, 2, &[5, 6]);
    assert!(matches!(
        decode(&good[..good.len() - 1]),
        Err(DecodeError::LengthMismatch { .. })
    ));
    let mut lying = good.clone();
    lying[12] = 3; // claims 3 fields, carries 2
    assert!(matches!(
        decode(&lying),
        Err(DecodeError::FieldCount { .. })
    ));
    let mut tiny = good;
    tiny[2] = 4;
    tiny[3] = 0;
    assert!(matches!(
        decode(&tiny),
        Err(DecodeError::LengthBelowHeader { .. })
    ));
    assert!(matches!(
        decode(&[1, 2, 3]),
        Err(DecodeError::ShortHeader { got: 3 })
    ));
    let too_many = encode_measure(1, 2, &[0; MAX_MEASURE_FIELDS + 1]);
    assert_eq!(
        decode(&too_many),
        Err(DecodeError::TooManyFields(MAX_MEASURE_FIELDS + 1))
    );
}

#[test]
fn frames_split_concatenated_messages() {
    let mut dgram = encode_ready(1);
    dgram.extend(encode_sync(0, 5));
    let frames: Vec<_> = Frames::new(&dgram).collect();
    assert_eq!(frames.len(), 2);
    assert_eq!(
        decode(frames[1].clone().expect("frame")),
        Ok(DatapathMsg::Sync { sid: 0, token: 5 })
    );
}

proptest! {
    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        for frame in Frames::new(&bytes).flatten() {
            let _ = decode(frame);
        }
        let _ = decode(&bytes);
    }

    #[test]
    fn measures_round_trip(sid: u32, uid: u32, fields in proptest::collection::vec(any::<u64>(), 0..=MAX_MEASURE_FIELDS)) {
        let bytes = encode_measure(sid, uid, &fields);
        prop_assert_eq!(decode(&bytes), Ok(DatapathMsg::Measure(MeasureMsg { sid, program_uid: uid, fields })));
    }

    #[test]
    fn priorities_round_trip(sid: u32, code in 0u32..3, thr: u64) {
        let msg = PriorityMsg { sid, class: PriorityClass::from_code(code).expect("valid"), flags: 0, hybrid_threshold_bytes_per_sec: thr };
        prop_assert_eq!(decode(&encode_priority(&msg)), Ok(DatapathMsg::Priority(msg)));
    }
}
