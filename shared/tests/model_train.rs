//! Models, the flat parameter view, local training and evaluation.

use burn::prelude::Device;
use edgecfl_shared::data::fmnist::FashionMnist;
use edgecfl_shared::model::{LayerSet, ModelKind, Net, ParamLayout, Params};
use edgecfl_shared::train::{LocalData, TrainConfig, evaluate, train_local};

#[test]
fn lenet5_has_44426_parameters_and_850_final() {
    let l = ParamLayout::of(ModelKind::LeNet5);
    // conv1 6·25+6, conv2 16·150+16, fc1 256·120+120, fc2 120·84+84, fc3 84·10+10
    assert_eq!(156 + 2416 + 30840 + 10164 + 850, 44426);
    assert_eq!(l.len(), 44426);
    assert_eq!(l.select(&LayerSet::Final).unwrap().len(), 850);
    // AdaCFL's smallest fully connected layer is fc3 too.
    assert_eq!(l.select(&LayerSet::SmallestFc).unwrap().len(), 850);
    // MT-HFL's shared feature layers of LeNet-5: the two convolutions.
    let conv = l.select(&"conv1,conv2".parse().unwrap()).unwrap();
    assert_eq!(conv.len(), 156 + 2416);
    assert!(l.select(&"nope".parse().unwrap()).is_err());
    // The burn module agrees on the count.
    let net = Net::from_params(&Params::init(ModelKind::LeNet5, 0), &Device::flex());
    assert_eq!(burn::module::Module::num_params(&net), 44426);
}

#[test]
fn mlp_layout() {
    let l = ParamLayout::of(ModelKind::Mlp);
    assert_eq!(l.len(), 784 * 32 + 32 + 32 * 10 + 10);
    assert_eq!(l.select(&LayerSet::Final).unwrap().len(), 330);
    assert_eq!(
        l.select(&"fc1".parse().unwrap()).unwrap().len(),
        784 * 32 + 32
    );
}

#[test]
fn params_round_trip_through_burn() {
    for kind in [ModelKind::LeNet5, ModelKind::Mlp] {
        let p = Params::init(kind, 42);
        let back = Net::from_params(&p, &Device::flex()).to_params();
        assert_eq!(p, back, "{kind}");
        // Autodiff device too.
        let back = Net::from_params(&p, &Device::flex().autodiff()).to_params();
        assert_eq!(p, back, "{kind} autodiff");
    }
}

#[test]
fn selection_extract_insert_round_trip() {
    let p = Params::init(ModelKind::LeNet5, 1);
    let sel = p.layout().select(&LayerSet::Final).unwrap();
    let part = sel.extract(&p.values);
    // fc3.weight then fc3.bias, the last 850 floats of the layout.
    assert_eq!(part, p.values[44426 - 850..]);
    let mut zeros = vec![0.0; p.values.len()];
    sel.insert(&mut zeros, &part);
    assert_eq!(zeros[44426 - 850..], p.values[44426 - 850..]);
    assert!(zeros[..44426 - 850].iter().all(|&v| v == 0.0));
}

#[test]
fn params_reject_bad_input() {
    assert!(Params::new(ModelKind::LeNet5, vec![0.0; 10]).is_err());
    let mut v = vec![0.0; 44426];
    v[200] = f32::NAN; // conv2.weight starts at 156
    let err = Params::new(ModelKind::LeNet5, v).unwrap_err().to_string();
    assert!(err.contains("conv2.weight"), "{err}");
}

#[test]
fn init_is_seeded_and_bounded() {
    let a = Params::init(ModelKind::LeNet5, 3);
    assert_eq!(a, Params::init(ModelKind::LeNet5, 3));
    assert_ne!(a, Params::init(ModelKind::LeNet5, 4));
    // fc3 bound is 1/sqrt(84)
    let fc3 = a
        .layout()
        .select(&LayerSet::Final)
        .unwrap()
        .extract(&a.values);
    let bound = 1.0 / 84f32.sqrt();
    assert!(fc3.iter().all(|v| v.abs() <= bound));
}

#[test]
fn training_lowers_loss_and_is_deterministic() {
    let data = FashionMnist::bundled().unwrap();
    let idx: Vec<usize> = (0..500).collect();
    let local = LocalData::from_dataset(&data.train, &idx, 0);
    let device = Device::flex();
    let p0 = Params::init(ModelKind::LeNet5, 0);
    let before = evaluate(&p0, &local, 100, &device).unwrap();
    let cfg = TrainConfig {
        epochs: 2,
        batch_size: 10,
        lr: 0.01,
        momentum: 0.5,
        seed: 9,
        threads: 1,
    };
    let (p1, rep) = train_local(&p0, &local, &cfg, &device).unwrap();
    assert_eq!(rep.steps, 100);
    assert_eq!(rep.samples, 1000);
    let after = evaluate(&p1, &local, 100, &device).unwrap();
    assert!(
        after.loss() < before.loss(),
        "{} → {}",
        before.loss(),
        after.loss()
    );
    assert!(after.accuracy() > before.accuracy());
    let (p2, _) = train_local(&p0, &local, &cfg, &device).unwrap();
    assert_eq!(p1, p2, "same seed, same result");
    // Per-label counts add up.
    assert_eq!(after.total_per_label.iter().sum::<usize>(), 500);
    let sub = after.restrict(&[0, 1]);
    assert_eq!(
        sub.total,
        after.total_per_label[0] + after.total_per_label[1]
    );
}

/// More classes widen only the last layer: LeNet-5 for CIFAR-100 is the 3-channel LeNet-5 with
/// fc3 84 → 100 (8 500 floats where CIFAR-10's has 850), and the length of a parameter vector
/// gives its class count back.
#[test]
fn a_hundred_classes_widen_only_the_final_layer() {
    let ten = ParamLayout::of(ModelKind::LeNet5Rgb);
    let hundred = ParamLayout::new(ModelKind::LeNet5Rgb, 100);
    // conv1 6·75+6, conv2 16·150+16, fc1 400·120+120, fc2 120·84+84, fc3 84·k+k.
    assert_eq!(ten.len(), 456 + 2416 + 48120 + 10164 + 850);
    assert_eq!(hundred.len(), 456 + 2416 + 48120 + 10164 + 8500);
    assert_eq!(hundred.select(&LayerSet::Final).unwrap().len(), 8500);
    assert_eq!(hundred.select(&LayerSet::SmallestFc).unwrap().len(), 8500);
    for (model, classes) in [
        (ModelKind::LeNet5Rgb, 100),
        (ModelKind::LeNet5Rgb, 20),
        (ModelKind::LeNet5, 10),
        (ModelKind::Mlp, 2),
        (ModelKind::Mlp, 256),
    ] {
        let len = ParamLayout::new(model, classes).len();
        assert_eq!(
            ParamLayout::classes_for(model, len),
            Some(classes),
            "{model}"
        );
        assert_eq!(ParamLayout::classes_for(model, len + 1), None, "{model}");
    }
    // One class, or more than labels (bytes) can name, is no model.
    let mlp = |k| ParamLayout::new(ModelKind::Mlp, k).len();
    assert_eq!(ParamLayout::classes_for(ModelKind::Mlp, mlp(1)), None);
    assert_eq!(ParamLayout::classes_for(ModelKind::Mlp, mlp(257)), None);
    assert_eq!(ParamLayout::classes_for(ModelKind::Mlp, 5), None);

    let p = Params::init_for(ModelKind::LeNet5Rgb, 100, 7);
    assert_eq!((p.values.len(), p.classes()), (hundred.len(), 100));
    assert_eq!(Params::new(p.model, p.values.clone()).unwrap(), p);
    let net = Net::from_params(&p, &Device::flex());
    assert_eq!(net.classes(), 100);
    assert_eq!(burn::module::Module::num_params(&net), hundred.len());
    assert_eq!(net.to_params(), p);
    // The same seed draws the same body: only the last layer differs from the ten-class model.
    let p10 = Params::init_for(ModelKind::LeNet5Rgb, 10, 7);
    let body = ten.len() - 850;
    assert_eq!(p.values[..body], p10.values[..body]);
}

/// A 20-class model trains and is evaluated on labels 0-19, and refuses a label past its
/// classes (a shard of another data set) with an error naming it.
#[test]
fn a_twenty_class_model_trains_on_twenty_labels_and_refuses_more() {
    let fm = FashionMnist::bundled().unwrap();
    // Fashion-MNIST's images, relabelled into 20 classes: label + 10 for every other image.
    let idx: Vec<usize> = (0..200).collect();
    let base = LocalData::from_dataset(&fm.train, &idx, 0);
    let pixels = base.pixels().unwrap().to_vec();
    let labels: Vec<u8> = base
        .labels
        .iter()
        .enumerate()
        .map(|(i, &l)| l + 10 * (i % 2) as u8)
        .collect();
    let data = LocalData::with_shape(base.shape(), pixels.clone(), labels);
    let p0 = Params::init_for(ModelKind::Mlp, 20, 1);
    let device = Device::flex();
    let cfg = TrainConfig {
        epochs: 2,
        batch_size: 20,
        lr: 0.05,
        momentum: 0.0,
        seed: 0,
        threads: 1,
    };
    let before = evaluate(&p0, &data, 50, &device).unwrap();
    let (p1, _) = train_local(&p0, &data, &cfg, &device).unwrap();
    assert_eq!(p1.classes(), 20);
    let after = evaluate(&p1, &data, 50, &device).unwrap();
    assert_eq!(after.total_per_label.len(), 20);
    assert_eq!(after.total_per_label.iter().sum::<usize>(), 200);
    assert!(after.total_per_label[10..].iter().sum::<usize>() == 100);
    assert!(after.loss_sum < before.loss_sum, "{after:?} vs {before:?}");
    // A ten-class model on the same shard: label 10 and up are not its classes.
    let ten = Params::init(ModelKind::Mlp, 1);
    let err = train_local(&ten, &data, &cfg, &device)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("label 1") && err.contains("10 classes"),
        "{err}"
    );
    assert!(evaluate(&ten, &data, 50, &device).is_err());
}

/// ResNet-9 with GroupNorm: hand-counted sizes (each block a 3 × 3 convolution with bias and a
/// GroupNorm's scale and shift per channel, then the classifier), the DAWNBench blocks' PyTorch
/// names as layers, FedClust's final layer the classifier, PyTorch's initialisation (uniform
/// convolutions within 1/√fan-in, scales 1, shifts 0), burn's own parameter count, the burn
/// network's round trip, and logits for a batch of images.
#[test]
fn resnet9_is_the_dawnbench_network_with_group_norm() {
    let block = |c_in: usize, out: usize| c_in * 9 * out + out + 2 * out;
    let body = block(3, 64)
        + block(64, 128)
        + 2 * block(128, 128)
        + block(128, 256)
        + block(256, 512)
        + 2 * block(512, 512);
    assert_eq!(body, 6_570_240);
    let ten = ParamLayout::of(ModelKind::ResNet9);
    let hundred = ParamLayout::new(ModelKind::ResNet9, 100);
    assert_eq!(ten.len(), body + 512 * 10 + 10);
    assert_eq!(hundred.len(), body + 512 * 100 + 100);
    assert_eq!(
        hundred.layers(),
        ["conv1", "conv2", "res1", "conv3", "conv4", "res2", "fc"]
    );
    assert_eq!(hundred.select(&LayerSet::Final).unwrap().len(), 51_300);
    assert_eq!(
        hundred.entry("res2.1.0.weight").unwrap().shape,
        [512, 512, 3, 3]
    );
    let p = Params::init_for(ModelKind::ResNet9, 100, 3);
    let values = |name: &str| &p.values[hundred.entry(name).unwrap().range()];
    assert!(values("res1.0.1.weight").iter().all(|&v| v == 1.0));
    assert!(values("conv4.1.bias").iter().all(|&v| v == 0.0));
    let bound = 1.0 / (256.0f32 * 9.0).sqrt();
    let conv4 = values("conv4.0.weight");
    assert!(conv4.iter().all(|v| v.abs() <= bound));
    assert!(conv4.iter().any(|v| v.abs() > 0.9 * bound));
    let device = Device::flex();
    let net = Net::from_params(&p, &device);
    assert_eq!((net.kind(), net.classes()), (ModelKind::ResNet9, 100));
    assert_eq!(burn::module::Module::num_params(&net), hundred.len());
    assert_eq!(net.to_params(), p);
    let images: Vec<f32> = (0..2 * 3 * 32 * 32)
        .map(|i| (i * 7919 % 253) as f32 / 255.0)
        .collect();
    let x = burn::tensor::Tensor::<4>::from_data(
        burn::tensor::TensorData::new(images, [2, 3, 32, 32]),
        &device,
    );
    let logits = net.forward(x);
    assert_eq!(logits.dims(), [2, 100]);
    let logits: Vec<f32> = logits.into_data().iter::<f32>().collect();
    assert!(logits.iter().all(|v| v.is_finite()));
    assert_ne!(logits[..100], logits[100..], "two images, two outputs");
}
